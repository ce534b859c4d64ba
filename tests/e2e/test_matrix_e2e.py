"""The image matrix end to end: the same tests on two images, booted for real.

The issue's own command runs the forensic example on two Debian suites (the built-in
console image of bullseye and of bookworm). The second test runs bullseye beside a
manifest of its own: the e2e image's manifest copied under another name with more
memory, so the guests differ in what a test reads (the Debian version, ``MemTotal``);
one plain run makes the report, a second one under ``-n 2`` (each image on its own
worker) compares with it and finds the one verdict that changed. ``scripts/test``
builds the bullseye image beforehand.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.image.resolve import resolve_image

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900
BIG_MEMORY_MIB = 448

ACROSS_IMAGES = """
import os

def test_memory(guest, adare_image, adare_record):
    kib = int(guest.shell("awk '/^MemTotal/ {print $2}' /proc/meminfo").check().stdout)
    adare_record("MemTotal MiB", kib // 1024)
    adare_record("distribution", f"{adare_image.distribution} {adare_image.version}")
    assert adare_image.kernel

def test_fails_where_told(guest, adare_image):
    assert adare_image.name != os.environ.get("FAIL_ON_IMAGE"), "told to fail here"
"""


def second_image(test_image: str, tmp_path: Path) -> Path:
    """``test_image``'s manifest as ``debian-big``: same disk, more memory."""
    manifest = resolve_image(test_image)
    assert manifest.path is not None, "the e2e image has a manifest"
    data = json.loads(manifest.path.read_text())
    for key in ("disk", "kernel", "initrd"):
        if data.get(key):
            data[key] = str((manifest.path.parent / data[key]).resolve())
    data.update(name="debian-big", memory_mib=BIG_MEMORY_MIB)
    folder = tmp_path / "debian-big"
    folder.mkdir()
    (folder / "adare-image.json").write_text(json.dumps(data))
    return folder


def cells(artifacts: Path) -> dict[str, Any]:
    document = json.loads((artifacts / "adare-matrix.json").read_text())
    return {test["test"]: test for test in document["tests"]}


REPO = Path(__file__).resolve().parents[2]
SUITES = ("--adare-vm=debian:bullseye", "--adare-vm=debian:bookworm")


def test_the_forensic_example_on_two_debian_suites(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    (pytester.path / "conftest_examples").mkdir()
    shutil.copy(REPO / "conftest_examples/test_forensic.py", pytester.path / "conftest_examples")
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", *SUITES, "conftest_examples/test_forensic.py",
        f"--adare-artifacts={artifacts}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    tests = ("test_create_modify_delete_shows_in_the_diff", "test_every_artifact_gets_a_verdict")
    result.stdout.fnmatch_lines(
        [
            *(f"*::{test}[[]debian-{suite}[]] PASSED*"
              for suite in ("bullseye", "bookworm") for test in tests),
            "*- adare: image matrix (2 tests x 2 images, 0 rows differ) -*",
            "* debian-bullseye * debian-bookworm",
            f"conftest_examples/test_forensic.py::{tests[0]}",
            "  verdict * passed * passed",
        ]
    )  # fmt: skip
    found = cells(artifacts)
    assert sorted(found) == [f"conftest_examples/test_forensic.py::{test}" for test in tests]
    for test in found.values():
        assert sorted(test["cells"]) == ["debian-bookworm", "debian-bullseye"]


def test_the_same_tests_on_two_images_then_a_baseline_under_xdist(
    pytester: pytest.Pytester,
    test_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytester.makepyfile(test_across=ACROSS_IMAGES)
    big_twin = second_image(test_image, tmp_path)
    images = ("--adare-vm=debian:bullseye", f"--adare-vm={big_twin}")
    first = tmp_path / "first"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", *images, f"--adare-artifacts={first}",
        timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_across.py::test_memory[[]debian-bullseye[]] PASSED*",
            "*test_across.py::test_memory[[]debian-big[]] PASSED*",
            "*- adare: image matrix (2 tests x 2 images, 2 rows differ) -*",
            "test_across.py::test_memory",
            "  verdict * passed * passed",
            "≠ record MemTotal MiB * [0-9]* * [0-9]*[*]",
            "≠ record distribution * debian 11 * debian 1[0-9][*]",
        ]
    )
    document = json.loads((first / "adare-matrix.json").read_text())
    facts = {image["name"]: image["facts"] for image in document["images"]}
    assert facts["debian-bullseye"]["version"] == "11", facts
    assert facts["debian-bullseye"]["distribution"] == "debian", facts
    memory = cells(first)["test_across.py::test_memory"]
    values = memory["cells"]
    small, big = (values[i]["records"]["MemTotal MiB"] for i in ("debian-bullseye", "debian-big"))
    assert big > small + 100, values
    assert memory["differences"] == [
        {"row": "record MemTotal MiB", "images": ["debian-big"]},
        {"row": "record distribution", "images": ["debian-big"]},
    ]

    monkeypatch.setenv("FAIL_ON_IMAGE", "debian-big")
    second = tmp_path / "second"
    baseline = first / "adare-matrix.json"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", *images,
        f"--adare-artifacts={second}", f"--adare-baseline={baseline}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- adare: image matrix (2 tests x 2 images, 3 rows differ) -*",
            f"*- adare: changes since {baseline} -*",
            "test_across.py::test_fails_where_told [[]debian-big[]] verdict: passed -> failed",
        ]
    )
    document = json.loads((second / "adare-matrix.json").read_text())
    assert [c["row"] for c in document["baseline"]["changes"]] == ["verdict"]
