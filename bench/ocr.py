"""Screen text (OCR): how often a printed marker is read exactly, and what a read costs.

    python bench/ocr.py [--console debian] [--desktop debian-desktop] [--markers 20]

Boots the console image (text on the VGA console, read from QMP screendumps) and the
desktop image (text in xterm's 6x13 font, read from the agent's screenshots). For each
of ``--markers`` random markers (``MARKER-`` + six digits 2-9, printed once) it records
whether :func:`find_text` on the first screenshot after the print reads it exactly,
the time of one full read (all four variants), and how long :meth:`wait_for_text` took
(it stops at the first variant that reads it). It also times tesseract's command line
(what ``pytesseract`` runs, one process per image) against the in-process API
(``tesserocr``) on the same screenshot. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from pytest_adare import launch
from pytest_adare.guest import Guest
from pytest_adare.screen.text import TextNotFound, find_text, ocr_lines, variant_images


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
        "min": round(min(values), 3),
    }


def marker() -> str:
    return "MARKER-" + "".join(random.choices("23456789", k=6))


def measure(guest: Guest, show: Callable[[str], None], markers: int) -> dict[str, Any]:
    exact, reads, waits, misread = 0, [], [], []
    shot = guest.screenshot()
    for _ in range(markers):
        text = marker()
        show(text)
        shot = guest.screenshot()
        started = time.perf_counter()
        found = find_text(text, shot)
        reads.append(time.perf_counter() - started)
        exact += bool(found)
        started = time.perf_counter()
        try:
            guest.wait_for_text(text, timeout=30)
            waits.append(time.perf_counter() - started)
        except TextNotFound as error:
            misread.append(f"{text} read as {error.text!r}"[:120])
    return {
        "screen": list(shot.size),
        "markers": markers,
        "exact_first_screenshot": exact,
        "found_by_wait": len(waits),
        "misread": misread,
        "read_all_variants_s": stats(reads),
        "wait_for_text_s": stats(waits) if waits else None,
        "cli_vs_inprocess": cli_vs_inprocess(shot),
    }


def cli_vs_inprocess(shot: Image.Image) -> dict[str, float]:
    """Seconds per variant image: ``tesseract IMAGE stdout --psm 11 tsv`` vs tesserocr."""
    with tempfile.TemporaryDirectory() as folder:
        cli, inprocess = [], []
        for name, image, scale in variant_images(shot):
            path = Path(folder) / f"{name}.png"
            image.save(path)
            started = time.perf_counter()
            subprocess.run(
                ["tesseract", str(path), "stdout", "--psm", "11", "tsv"],
                capture_output=True,
                check=True,
            )
            cli.append(time.perf_counter() - started)
            started = time.perf_counter()
            ocr_lines(image, name, scale, (0, 0))
            inprocess.append(time.perf_counter() - started)
    return {"cli_s": round(sum(cli), 3), "inprocess_s": round(sum(inprocess), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--console", default="debian")
    parser.add_argument("--desktop", default="debian-desktop")
    parser.add_argument("--markers", type=int, default=20)
    args = parser.parse_args()
    random.seed(16)
    results: dict[str, Any] = {}
    with launch(args.console, progress=None) as vm:

        def on_tty1(text: str) -> None:
            vm.guest.shell(f"printf '\\033c%s\\n' '{text}' > /dev/tty1").check()

        results["console"] = measure(vm.guest, on_tty1, args.markers)
    with launch(args.desktop, progress=None) as vm:

        def in_xterm(text: str) -> None:
            vm.guest.keyboard.type(f"clear; echo {text.lower()} | tr a-z A-Z")
            vm.guest.keyboard.press("enter")
            vm.guest.shell("sleep 1")  # xterm draws the output

        results["desktop"] = measure(vm.guest, in_xterm, args.markers)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
