"""The test vocabulary's waits: what a wait costs beyond the work it waits for.

    python bench/vocabulary.py [--desktop debian-desktop] [--runs 5]

Boots the desktop image once (1024x768, the agent's screenshots) and measures, each
``--runs`` times:

- ``wait_for_text`` of a marker just printed in the terminal (the first match) and of
  text that never shows (a 5 s timeout: how long it really took, and how many
  distinct screens it read);
- ``wait_until_succeeds`` of a command that succeeds on its third try, beside the same
  three runs as plain ``shell`` calls (the floor: what the wait adds is its two 100 ms
  gaps and its bookkeeping).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from pytest_adare import launch
from pytest_adare.screen.text import TextNotFound


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--desktop", default="debian-desktop")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    first_match: list[float] = []
    timeouts: list[float] = []
    screens: list[int] = []
    third_try: list[float] = []
    three_shells: list[float] = []
    with launch(args.desktop, progress=None) as vm:
        guest = vm.guest
        size = guest.screenshot().size
        for run in range(args.runs):
            marker = "SEEN-" + "".join(random.choices("23456789", k=6))
            guest.keyboard.type(f"clear; echo {marker}\n")
            started = time.perf_counter()
            guest.wait_for_text(marker, timeout=60)
            first_match.append(time.perf_counter() - started)

            started = time.perf_counter()
            try:
                guest.wait_for_text("NEVER-ON-SCREEN", timeout=5)
            except TextNotFound as error:
                timeouts.append(time.perf_counter() - started)
                screens.append(int(str(error).split("(")[1].split(" distinct")[0]))

            counter = f"/tmp/tries-{run}"
            command = f"echo x >> {counter}; [ $(wc -l < {counter}) -ge 3 ]"
            started = time.perf_counter()
            guest.wait_until_succeeds(command, timeout=60)
            third_try.append(time.perf_counter() - started)
            floor = f"/tmp/floor-{run}"
            started = time.perf_counter()
            for _ in range(3):
                guest.shell(command.replace(counter, floor))
            three_shells.append(time.perf_counter() - started)
    result: dict[str, Any] = {
        "screen": list(size),
        "runs": args.runs,
        "wait_for_text_first_match_s": stats(first_match),
        "wait_for_text_5s_timeout_s": stats(timeouts),
        "wait_for_text_timeout_screens_read": stats([float(n) for n in screens]),
        "wait_until_succeeds_third_try_s": stats(third_try),
        "three_plain_shell_calls_s": stats(three_shells),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
