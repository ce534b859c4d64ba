"""The console image's build beside the same build packing the kernel's initramfs
(JSON on stdout).

    python bench/image_build.py [--rounds 2] [--image debian] [--mirror URL]

Each round runs ``adare-image build IMAGE --out DIR`` into a fresh directory twice, the
two interleaved: as it builds (``update-initramfs`` diverted to ``/bin/true`` while the
packages go in, image/rootfs.py) and with that hook replaced by ``true``, so the kernel's
install packs its initramfs (twice: its postinst, then initramfs-tools' trigger) as it
did before. Both images are the same but for dpkg's ``diversions-old``; the initramfs was
never booted. Run as root (mmdebstrap's root mode); each phase's seconds are read from
its progress lines.
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
from pathlib import Path
from typing import Any

_PHASE = re.compile(r"^\[\s*[\d.]+s\] (\w+)\s+([\d.]+) s")
_BUILD = (
    "import sys; from pytest_adare.image import rootfs; "
    "rootfs.NO_INITRAMFS_HOOK = sys.argv.pop(1) or rootfs.NO_INITRAMFS_HOOK; "
    "from pytest_adare.image_cli import main; sys.exit(main(sys.argv[1:]))"
)


def build(image: str, out: Path, mirror: str, packing: bool) -> dict[str, Any]:
    hook = "true" if packing else ""
    argv = [sys.executable, "-c", _BUILD, hook, "build", image, "--out", str(out),
            "--mirror", mirror]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"build failed:\n{done.stdout}\n{done.stderr}")
    phases = {m[1]: float(m[2]) for line in done.stdout.splitlines() if (m := _PHASE.match(line))}
    return {"seconds": round(took, 1), "rootfs_s": phases.get("rootfs")}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [run["seconds"] for run in runs]
    return {"median_s": round(statistics.median(seconds), 1), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--image", default="debian")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    args = parser.parse_args(argv)
    ours: list[dict[str, Any]] = []
    packing: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="adare-bench-build-") as scratch:
        for index in range(args.rounds):
            for kind, runs in (("ours", ours), ("packing", packing)):
                out = Path(scratch) / f"{kind}-{index}"
                runs.append(build(args.image, out, args.mirror, packing=kind == "packing"))
    print(json.dumps({"image": args.image, "rounds": args.rounds,
                      "ours": _summary(ours), "packing_initramfs": _summary(packing)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
