"""Per-test clean state: ``snapshot`` (restore the saved ready state) beside ``reboot``.

Writes a test file of N tests (each leaves a file behind and checks that the previous
test's file is gone), runs it with pytest under each isolation mode on the same image
in one run, and prints one JSON object: the per-test clean-state times the plugin
recorded (JUnit property ``adare_clean_state``) and each run's wall-clock total; and
where one restore's time goes (``restore_breakdown``: ``vm.last_restore``'s steps and
the first tool call after it, median of ``--restores`` on a ``launch()``ed VM).

Run: ``python bench/isolation.py --image debian [--tests 20]``
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

TEST_FILE = """
import pytest

@pytest.mark.parametrize("n", range({count}))
def test_leaves_a_file(guest, n):
    assert guest.shell("ls /dev/shm/adare-bench-* 2>/dev/null").stdout == ""
    guest.shell(f"echo {{n}} > /dev/shm/adare-bench-{{n}}").check()
"""

CLEAN_TIME = re.compile(r"([0-9.]+) s$")


def run_mode(image: str, mode: str, count: int, workdir: Path) -> dict[str, Any]:
    """Run the N-test file under ``mode``; wall time, per-test clean-state times, outcome."""
    folder = workdir / mode
    folder.mkdir()
    (folder / "test_isolation_bench.py").write_text(TEST_FILE.format(count=count))
    junit = folder / "junit.xml"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--adare-vm={image}",
            f"--adare-isolation={mode}",
            f"--junitxml={junit}",
            str(folder),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        check=False,
        timeout=3600,
    )
    total = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    times = [
        float(m.group(1))
        for prop in ET.parse(junit).iter("property")
        if prop.get("name") == "adare_clean_state"
        and (m := CLEAN_TIME.search(prop.get("value", "")))
    ]
    per_test = times[1:] if mode == "snapshot" else times  # the first one is the save
    return {
        "tests": count,
        "total_seconds": round(total, 2),
        "clean_state_seconds": {
            "count": len(per_test),
            "median": round(statistics.median(per_test), 3) if per_test else None,
            "max": round(max(per_test), 3) if per_test else None,
        },
    }


def restore_breakdown(image: str, count: int, workdir: Path) -> dict[str, Any]:
    """Median milliseconds of each step of ``restore_ready`` and of the first call after."""
    from pytest_adare import launch

    steps: dict[str, list[float]] = {}
    with launch(image, workdir=workdir / "breakdown", progress=None) as vm:
        vm.save_ready()
        for _ in range(count):
            vm.guest.shell("touch /dev/shm/adare-bench-dirty").check()
            vm.restore_ready()
            t = time.monotonic()
            vm.guest.call("get_timestamp")
            for name, seconds in {**vm.last_restore, "first_call": time.monotonic() - t}.items():
                steps.setdefault(name, []).append(seconds)
    medians = {f"{name}_ms": round(statistics.median(s) * 1000, 1) for name, s in steps.items()}
    return {"restores": count, **medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian", help="--adare-vm value (default debian)")
    parser.add_argument("--tests", type=int, default=20, help="tests per file (default 20)")
    parser.add_argument("--restores", type=int, default=8, help="restores timed step by step")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="adare-bench-") as tmp:
        snapshot = run_mode(args.image, "snapshot", args.tests, Path(tmp))
        reboot = run_mode(args.image, "reboot", args.tests, Path(tmp))
        breakdown = restore_breakdown(args.image, args.restores, Path(tmp))
    snap_median = snapshot["clean_state_seconds"]["median"]
    reboot_median = reboot["clean_state_seconds"]["median"]
    print(
        json.dumps(
            {
                "benchmark": "per-test clean state",
                "image": args.image,
                "snapshot": snapshot,
                "reboot": reboot,
                "per_test_speedup": round(reboot_median / snap_median, 1)
                if snap_median and reboot_median
                else None,
                "file_total_speedup": round(reboot["total_seconds"] / snapshot["total_seconds"], 1),
                "restore_breakdown": breakdown,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
