"""Hypervisor evidence: the time and size of each capture of a running VM (JSON on stdout).

    python bench/evidence.py [--image debian] [--runs 3]

One VM of the image (``launch()``); each capture ``--runs`` times, the file removed after
each: ``vm.dump_memory`` (ELF, paused and resumed), ``vm.export_disk`` as raw and as
qcow2, then ``vm.collect_evidence`` (memory, raw disk, pcap, sha256 of each, manifests)
once. Times are median, min and max; sizes are the file's length (``bytes``) and the
disk space it takes (``allocated_bytes``: a raw export is sparse).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_adare import launch


def sizes(path: Path) -> dict[str, int]:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return {
        "bytes": sum(p.stat().st_size for p in files),
        "allocated_bytes": sum(p.stat().st_blocks * 512 for p in files),
    }


def timed(runs: int, capture: Callable[[], Path]) -> dict[str, Any]:
    """Run ``capture`` ``runs`` times: its times, and the sizes of the last file it made."""
    seconds: list[float] = []
    made: dict[str, int] = {}
    for _ in range(runs):
        started = time.monotonic()
        path = capture()
        seconds.append(time.monotonic() - started)
        made = sizes(path)
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return {
        "median_s": round(statistics.median(seconds), 2),
        "min_s": round(min(seconds), 2),
        "max_s": round(max(seconds), 2),
        "runs": runs,
        **made,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="adare-bench-evidence-") as tmp:
        out = Path(tmp)
        with launch(args.image, workdir=out / "vm", progress=None) as vm:
            result: dict[str, Any] = {
                "benchmark": "hypervisor evidence",
                "image": args.image,
                "memory_elf": timed(args.runs, lambda: vm.dump_memory(out / "memory.elf")),
                "disk_raw": timed(args.runs, lambda: vm.export_disk(out / "disk.raw", "raw")),
                "disk_qcow2": timed(
                    args.runs, lambda: vm.export_disk(out / "disk.qcow2", "qcow2")
                ),
            }

            def collect() -> Path:
                vm.collect_evidence(out / "evidence")
                return out / "evidence"

            result["collect_evidence"] = timed(1, collect)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
