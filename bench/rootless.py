"""The console image built as root beside the same build as an ordinary user (JSON on stdout).

    python bench/rootless.py [--user adare-bench] [--mirror URL]

Both run ``adare-image build debian --out DIR`` into a fresh directory, one after the
other on the same host (download and dpkg dominate both); each phase's seconds are read
from its progress lines. Run as root, the ordinary user is made for it (``useradd``
with subordinate ids, tests/e2e/unprivileged.py) and runs the system Python over a
readable copy of this checkout; run as an ordinary user, only the rootless build is
measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from unprivileged import ordinary_user  # noqa: E402

_PHASE = re.compile(r"^\[\s*[\d.]+s\] (\w+)\s+([\d.]+) s")


def _measured(done: subprocess.CompletedProcess[str], took: float) -> dict[str, Any]:
    if done.returncode != 0:
        raise SystemExit(f"build failed:\n{done.stdout}\n{done.stderr}")
    lines = done.stdout.splitlines()
    phases = {m[1]: float(m[2]) for line in lines if (m := _PHASE.match(line))}
    return {"seconds": round(took, 1), "phases": phases}


def build_here(out: Path, mirror: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest_adare.image_cli", "build", "debian", "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run([*argv, "--mirror", mirror], capture_output=True, text=True)
    return _measured(done, time.perf_counter() - started)


def build_as_user(name: str, base: Path, mirror: str) -> dict[str, Any]:
    user = ordinary_user(name, base)
    work = base / "work"
    work.mkdir()
    os.chown(work, user.uid, user.gid)
    argv = ["python", "-m", "pytest_adare.image_cli", "build", "debian", "--out",
            str(work / "img"), "--mirror", mirror]  # fmt: skip
    started = time.perf_counter()
    done = user.run(argv, cache=work / "cache", cwd=work, timeout=3600)
    return _measured(done, time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", default="adare-bench")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="adare-bench-rootless-"))
    base.chmod(0o755)  # mkdtemp's 0700 would keep the ordinary user out of its copy
    try:
        result: dict[str, Any] = {"image": "debian (console)"}
        if os.geteuid() == 0:
            result["root_build"] = build_here(base / "root-img", args.mirror)
            result["rootless_build"] = build_as_user(args.user, base / "user", args.mirror)
            ratio = result["rootless_build"]["seconds"] / result["root_build"]["seconds"]
            result["rootless_over_root"] = round(ratio, 2)
        else:
            result["rootless_build"] = build_here(base / "user-img", args.mirror)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
