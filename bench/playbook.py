"""An adare experiment's per-action overhead beside the same steps as a Python test.

    python bench/playbook.py [--image debian] [--actions 40] [--runs 3]

Boots the image once and runs, ``--runs`` times each, on that one VM:

- experiments of 1 and of ``--actions`` ``command`` actions (``echo N`` with a
  template and a ``capture``), ``settings.idle: 0``, through ``guest.run_playbook``;
- the same commands as ``guest.shell`` calls in Python.

An experiment's fixed cost (reading it, the agent's automatic variables: one python3
start in the guest, the results file) is the 1-action run; the per-action cost is the
slope between the two sizes, beside the Python loop's per-call cost.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pytest_adare import launch


def experiment(folder: Path, actions: int) -> Path:
    """An experiment of ``actions`` templated, captured ``echo`` commands."""
    lines = ["settings:", "  idle: 0", "variables:", "  word: {type: string, value: w}",
             "actions:"]  # fmt: skip
    for index in range(actions):
        lines += [
            "  - command:",
            f'      command: "echo {{{{word}}}}-{index}"',
            "      capture: {variable: last}",
        ]
    path = folder / f"bench_{actions}" / "playbook.yml"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian")
    parser.add_argument("--actions", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    one_runs: list[float] = []
    many_runs: list[float] = []
    python_runs: list[float] = []
    with tempfile.TemporaryDirectory() as scratch, launch(args.image, progress=None) as vm:
        guest = vm.guest
        one = experiment(Path(scratch), 1)
        many = experiment(Path(scratch), args.actions)
        for run in range(args.runs):
            for folder, times in ((one, one_runs), (many, many_runs)):
                started = time.perf_counter()
                result = guest.run_playbook(
                    folder, artifacts=Path(scratch) / f"a{run}{folder.name}"
                )
                times.append(time.perf_counter() - started)
                assert result.passed, result.report()
            started = time.perf_counter()
            for index in range(args.actions):
                guest.shell(f"echo w-{index}").check()
            python_runs.append(time.perf_counter() - started)
    one_s, many_s = statistics.median(one_runs), statistics.median(many_runs)
    python_s = statistics.median(python_runs)
    per_action = (many_s - one_s) / (args.actions - 1)
    print(json.dumps({
        "image": args.image, "actions": args.actions, "runs": args.runs,
        "experiment_1_action_s": round(one_s, 3),
        f"experiment_{args.actions}_actions_s": round(many_s, 3),
        "python_s": round(python_s, 3),
        "per_action_playbook_ms": round(1000 * per_action, 1),
        "per_call_python_ms": round(1000 * python_s / args.actions, 1),
        "overhead_per_action_ms": round(1000 * (per_action - python_s / args.actions), 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
