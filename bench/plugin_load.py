"""What installing pytest-adare costs a project that never boots a VM (JSON on stdout).

    python bench/plugin_load.py [--runs 15] [--imports 9]

In an empty directory: ``pytest --version`` with the plugin and with ``-p no:adare``,
the two interleaved ``--runs`` times each (medians, and the spread of single runs), and
``python -X importtime`` of ``import pytest, pytest_asyncio, pytest_adare.plugin``
``--imports`` times: the cumulative import time of the plugin module (what it adds
after pytest) and of pytest-asyncio (a dependency that loads in both columns), medians.
Python and the packages are this interpreter's (run_all: the project's venv).
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
from typing import Any

_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|\s+(\S+)$")


def pytest_version_s(directory: str, disabled: bool) -> float:
    command = [sys.executable, "-m", "pytest", "--version", *(["-p", "no:adare"] * disabled)]
    started = time.perf_counter()
    subprocess.run(command, cwd=directory, capture_output=True, check=True)
    return time.perf_counter() - started


def cumulative_import_ms(
    directory: str, statement: str, modules: tuple[str, ...]
) -> dict[str, float]:
    """Each of ``modules``' cumulative import time (ms) while ``statement`` runs."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        cwd=directory, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = _IMPORT_LINE.search(line)
        if match and match[2] in modules:
            found[match[2]] = int(match[1]) / 1000
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--imports", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="adare-plugin-load-") as empty:
        with_plugin: list[float] = []
        without: list[float] = []
        pytest_version_s(empty, False)  # the first run warms the page cache for both
        for _ in range(args.runs):
            with_plugin.append(pytest_version_s(empty, False))
            without.append(pytest_version_s(empty, True))
        modules = ("pytest_adare.plugin", "pytest_asyncio")
        # pytest first: what the plugin adds to a run that imports pytest anyway
        statement = "import pytest, pytest_asyncio, pytest_adare.plugin"
        imports = [cumulative_import_ms(empty, statement, modules) for _ in range(args.imports)]

    def summary(seconds: list[float]) -> dict[str, Any]:
        ms = [s * 1000 for s in seconds]
        return {"median_ms": round(statistics.median(ms), 1), "min_ms": round(min(ms), 1),
                "max_ms": round(max(ms), 1), "n": len(ms)}  # fmt: skip

    result = {
        "benchmark": "plugin load",
        "python": sys.version.split()[0],
        "pytest_version": {"with_plugin": summary(with_plugin), "without": summary(without)},
        "import_ms": {
            name.replace(".", "_"): round(statistics.median(i[name] for i in imports), 1)
            for name in modules
            if all(name in i for i in imports)
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
