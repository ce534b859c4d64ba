"""The systemd images' start-up beside the busybox console image's, in one run.

For each image (``debian``: busybox init, the alternative; ``debian-systemd``;
``debian-xfce``: LightDM's autologin into XFCE) it times ``--cold`` boots with
``warm="off"`` (boot, systemd or init, the agent, on the desktop the session, until the
ready command says so) and ``--warm`` starts from the ready state a first cold boot
saved, and prints one JSON object with each image's medians (QEMU's start to the first
tool answered, as ``bench/warm_start.py`` counts it), the phases of the last start,
and the image's disk size and memory. ``--build`` first times ``adare-image build`` of
each into an empty cache (mmdebstrap from the Debian mirror, the kernel, the disk).

Run: ``python bench/real_installs.py [--build] [--cold 1] [--warm 3] [--images debian,...]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from warm_start import one_start

from pytest_adare.image.resolve import resolve_image

IMAGES = ("debian", "debian-systemd", "debian-xfce")


def image_facts(image: str) -> dict[str, Any]:
    manifest = resolve_image(image)
    return {
        "disk_mib": round(Path(manifest.disk).stat().st_size / 2**20, 1),
        "memory_mib": manifest.memory_mib,
    }


def build_seconds(image: str, root: Path) -> float:
    """Seconds of ``adare-image build IMAGE`` into an empty cache under ``root``."""
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "build-cache")}
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pytest_adare.image_cli", "build", image],
        env=env, check=True, stdout=subprocess.DEVNULL, timeout=3600,
    )  # fmt: skip
    return round(time.monotonic() - started, 1)


def measure(image: str, cold: int, warm: int, root: Path) -> dict[str, Any]:
    one_start(image, "auto", root / "prime")  # saves the ready state when none is cached
    colds = [one_start(image, "off", root / f"cold-{i}") for i in range(cold)]
    warms = [one_start(image, "auto", root / f"warm-{i}") for i in range(warm)]
    return {**image_facts(image), "cold": summary(colds), "warm": summary(warms)}


def summary(starts: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of ``starts`` (QEMU's start to the first tool answered) and the phases
    of the last one."""
    return {
        "median_qemu_start_to_first_tool_s": statistics.median(
            start["qemu_start_to_first_tool_s"] for start in starts
        ),
        "phases": starts[-1]["phases"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", type=int, default=1, help="cold boots per image")
    parser.add_argument("--warm", type=int, default=3, help="warm starts per image")
    parser.add_argument("--images", default=",".join(IMAGES))
    parser.add_argument("--build", action="store_true", help="time each build first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="adare-bench-installs-") as tmp:
        results = {}
        for image in args.images.split(","):
            built = {"build_s": build_seconds(image, Path(tmp) / image)} if args.build else {}
            results[image] = {**built, **measure(image, args.cold, args.warm, Path(tmp) / image)}
    json.dump({"images": results}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
