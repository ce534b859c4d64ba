"""A two-image matrix beside the same tests on one image (JSON on stdout).

    python bench/matrix.py [--images debian:bullseye,debian:bookworm] [--runs 1]
                           [--tests conftest_examples/test_forensic.py]

Runs the ``--tests`` file (default: the forensic example) with ``pytest`` the way a
user does: on the last of ``--images`` alone, on all of them (a matrix: each image its
own VM and warm states), and on all of them under ``-n 2 --dist loadgroup`` (one image
per worker). Each is a whole pytest session, VM start-ups included; the medians of
``--runs`` wall times in seconds. A first matrix session, timed on its own, builds what
is missing and saves every image's warm state.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_adare.image.resolve import resolve_image
from pytest_adare.machine_tools.accel import choose_accel

REPO = Path(__file__).resolve().parents[1]


def session_s(project: Path, *args: str) -> float:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="debian:bullseye,debian:bookworm")
    parser.add_argument("--tests", type=Path, default=REPO / "conftest_examples/test_forensic.py")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    images = [image for image in args.images.split(",") if image]
    # Built (or found in the cache) before any session is timed; the accelerator each
    # image's kernel gets (the verdicts the sessions' probes left).
    manifests = [resolve_image(image) for image in images]
    accels = {choose_accel(probe_kernel=m.kernel).accel for m in manifests}
    with tempfile.TemporaryDirectory(prefix="adare-bench-matrix-") as tmp:
        project = Path(tmp)
        tests = project / args.tests.name
        shutil.copy(args.tests, tests)
        every = [f"--adare-vm={image}" for image in images]
        sessions = {
            "one_image_s": [every[-1], tests.name],
            "two_images_s": [*every, tests.name],
            "two_images_n2_s": [*every, tests.name, "-n", "2", "--dist", "loadgroup"],
        }
        first = session_s(project, *sessions["two_images_s"])
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(args.runs):
            for name, session_args in sessions.items():
                times[name].append(session_s(project, *session_args))
    result = {name: round(statistics.median(values), 2) for name, values in times.items()}
    print(json.dumps({
        "images": images, "tests": args.tests.name, "runs": args.runs,
        "accel": "/".join(sorted(accels)),
        "first_two_images_s": round(first, 2), **result,
        "two_over_one": round(result["two_images_s"] / result["one_image_s"], 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
