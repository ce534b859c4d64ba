"""Warm start beside a cold boot of the same image, in one run.

Starts the image ``--runs`` times with ``warm="off"`` (cold: boot, agent start,
connect) and ``--runs`` times warm (the ready state saved by a first cold boot is
loaded, the agent re-keyed, the guest clock set), and prints one JSON object with the
median time from QEMU's start to the first tool answered (``start-up phases`` minus
the host-side bundle phase, plus one ``get_timestamp`` call) and the whole
``launch()`` wall time for each.

Run: ``python bench/warm_start.py [--image debian] [--runs 3]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare import launch


def one_start(image: str, warm: str, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    with launch(image, warm=warm, workdir=workdir, progress=None) as vm:  # type: ignore[arg-type]
        phases = {phase.name: phase.seconds for phase in vm.phases}
        answered = time.monotonic()
        vm.guest.call("get_timestamp")
        first_call = time.monotonic() - answered
        wall = time.monotonic() - started
    to_ready = sum(s for name, s in phases.items() if name not in ("bundle", "warm-save"))
    return {
        "qemu_start_to_first_tool_s": round(to_ready + first_call, 3),
        "launch_wall_s": round(wall, 3),
        "phases": {name: round(s, 3) for name, s in phases.items()},
    }


def series(image: str, warm: str, runs: int, root: Path) -> dict[str, Any]:
    results = [one_start(image, warm, root / f"{warm}-{i}") for i in range(runs)]
    return {
        "median_qemu_start_to_first_tool_s": statistics.median(
            r["qemu_start_to_first_tool_s"] for r in results
        ),
        "median_launch_wall_s": statistics.median(r["launch_wall_s"] for r in results),
        "runs": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default="debian")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="adare-bench-warm-") as tmp:
        root = Path(tmp)
        first = one_start(args.image, "auto", root / "prime")  # saves the state if needed
        cold = series(args.image, "off", args.runs, root)
        warm = series(args.image, "auto", args.runs, root)
    json.dump(
        {"image": args.image, "priming_run": first, "cold": cold, "warm": warm},
        sys.stdout,
        indent=1,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
