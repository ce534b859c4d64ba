"""What an analysis step costs on the host over a desktop disk (JSON on stdout).

    python bench/analysis.py [--image debian-desktop] [--tool dissect.target==3.25.1 ...]

One VM of the image (``launch()``) and one raw export of its disk; then, over that same
file, Dissect's ``trash`` and ``recently_used`` plugins plus a walk of ``/home`` as the
analysis step, once per ``--tool`` version in its cached environment (built first when
missing: that build is not in the figures), and the Sleuth Kit's ``fls -r -p`` of the
whole disk. Each figure is the wall time and the peak resident memory of the process
that did the work (the step's own ``ru_maxrss``; fls's through a small parent that
only waits for it), so the VM's QEMU is not in them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare import launch
from pytest_adare.analysis.step import AnalysisStep, run_in_environment
from pytest_adare.analysis.tool_envs import ToolSpec, tool_python

REPO = Path(__file__).resolve().parents[1]
VERSIONS = tuple((REPO / "tests" / "analysis" / "dissect-versions.txt").read_text().split())
STEP = """
from dissect.target.exceptions import UnsupportedPluginError


def records_of(target, plugin):
    try:  # a plugin with nothing to read (no Trash yet) refuses to run
        return list(getattr(target, plugin)())
    except UnsupportedPluginError:
        return []


def desktop(target):
    return {
        "trash": records_of(target, "trash"),
        "recentlyused": records_of(target, "recently_used"),
        "home": [{"path": str(p)} for p in target.fs.path("/home").rglob("*")],
    }
"""
FLS_PEAK = (
    "import resource, subprocess, sys, time; t = time.monotonic(); "
    "n = subprocess.run(['fls', '-r', '-p', sys.argv[1]], capture_output=True, check=True)"
    ".stdout.count(b'\\n'); "
    "print(n, time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def fls_cost(disk: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", FLS_PEAK, str(disk)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    entries, seconds, peak_kib = done.stdout.split()
    return {"entries": int(entries), "seconds": round(float(seconds), 2),
            "peak_rss_mib": round(int(peak_kib) / 1024, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian-desktop")
    parser.add_argument("--tool", action="append", default=None)
    args = parser.parse_args(argv)
    specs = [ToolSpec.parse(t) for t in args.tool or VERSIONS]
    pythons = [tool_python(spec) for spec in specs]  # built (or found) before timing
    with tempfile.TemporaryDirectory(prefix="adare-bench-analysis-") as tmp:
        out = Path(tmp)
        (out / "step.py").write_text(STEP)
        with launch(args.image, workdir=out / "vm", progress=None) as vm:
            started = time.monotonic()
            disk = vm.export_disk(out / "disk.raw")
            export_s = time.monotonic() - started
        steps = {}
        for spec, python in zip(specs, pythons, strict=True):
            run = run_in_environment(AnalysisStep(out / "step.py", "desktop"), python, disk,
                                     spec.text, spec.names)  # fmt: skip
            assert run.records is not None
            steps[spec.text] = {
                "seconds": round(run.seconds, 2), "peak_rss_mib": run.peak_rss_mib,
                "records": {kind: len(rows) for kind, rows in run.records.items()},
            }  # fmt: skip
        result = {
            "benchmark": "analysis step over a desktop disk",
            "image": args.image,
            "disk_bytes": disk.stat().st_size,
            "disk_allocated_bytes": disk.stat().st_blocks * 512,
            "export_s": round(export_s, 2),
            "dissect_step": steps,
            "fls": fls_cost(disk),
        }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
