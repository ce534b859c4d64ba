"""A two-image matrix beside the same tests on one image (JSON on stdout).

    python bench/matrix.py [--image debian] [--tests 4] [--runs 1]

Writes ``--tests`` tests (each one ``guest.shell`` and an ``adare_record``) and runs
them with ``pytest``: on ``--image`` alone, on it and a copy of its manifest under
another name (a second image of the matrix: its own VM, its own warm states), and the
same two under ``-n 2 --dist loadgroup`` (one image per worker). Each is a whole pytest
session, VM start-ups included; the medians of ``--runs`` wall times in seconds.
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

from pytest_adare.image.resolve import resolve_image

TEST = """
def test_{n}(guest, adare_record):
    adare_record("kernel", guest.shell("uname -r").check().stdout.strip())
"""


def copy_of(image: str, folder: Path) -> Path:
    """``image``'s manifest under the name ``copy`` (same disk, kernel and memory)."""
    manifest = resolve_image(image)
    assert manifest.path is not None, f"{image} has no manifest to copy"
    data = json.loads(manifest.path.read_text())
    for key in ("disk", "kernel", "initrd"):
        if data.get(key):
            data[key] = str((manifest.path.parent / data[key]).resolve())
    data["name"] = "copy"
    folder.mkdir()
    (folder / "adare-image.json").write_text(json.dumps(data))
    return folder


def session_s(project: Path, *args: str) -> float:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get("ADARE_BENCH_IMAGE", "debian"))
    parser.add_argument("--tests", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="adare-bench-matrix-") as tmp:
        project = Path(tmp)
        (project / "test_matrix.py").write_text(
            "".join(TEST.format(n=n) for n in range(args.tests))
        )
        second = copy_of(args.image, project / "copy")
        one = ["--adare-vm", args.image]
        two = [*one, "--adare-vm", str(second)]
        sessions = {
            "one_image_s": one,
            "two_images_s": two,
            "two_images_n2_s": [*two, "-n", "2", "--dist", "loadgroup"],
        }
        times: dict[str, list[float]] = {name: [] for name in sessions}
        session_s(project, *two)  # the first session saves both images' warm states
        for _ in range(args.runs):
            for name, session_args in sessions.items():
                times[name].append(session_s(project, *session_args))
    result = {name: round(statistics.median(values), 2) for name, values in times.items()}
    print(json.dumps({"image": args.image, "tests": args.tests, "runs": args.runs, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
