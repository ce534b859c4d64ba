"""``python -m pytest_adare.analysis.step_main MODULE.py FUNCTION DISK RESULT.json [DIST...]``:
one analysis step in a tool version's environment (see :mod:`.step`).

Writes ``{"records", "versions", "peak_rss_mib"}`` to ``RESULT.json``, or ``{"error"}``
with exit status 1: the host reads the file, never this process's output (a tool may
log anything there).
"""

from __future__ import annotations

import importlib.metadata
import json
import resource
import sys
import traceback
from pathlib import Path

from pytest_adare.analysis.records import plain_records
from pytest_adare.analysis.step import AnalysisStep
from pytest_adare.analysis.target import open_target


def peak_rss_mib() -> float:
    """This process's peak resident memory since its exec: ``VmHWM`` (ru_maxrss would
    include the parent's, which a vfork-started child inherits)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main(argv: list[str]) -> int:
    module, function, disk, result, *dists = argv
    try:
        step = AnalysisStep(Path(module), function).load()
        records = plain_records(step(open_target(disk)))
        versions = {d: importlib.metadata.version(d) for d in dists}
    except Exception as error:  # everything is reported to the host, which names the version
        traceback.print_exc()
        Path(result).write_text(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    answer = {"records": records, "versions": versions, "peak_rss_mib": peak_rss_mib()}
    Path(result).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
