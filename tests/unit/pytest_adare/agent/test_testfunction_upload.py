"""Zipping guest test-function collections on the host, and judging their outcomes."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from adare_guest.archive import extract_archive
from adare_guest.testfunctions import TestStatus, run_test_function
from adare_guest.testfunctions.library import load_collection
from pytest_adare.agent.testfunction_upload import (
    MAX_ZIP_BYTES,
    GuestTestWarning,
    InvalidCollection,
    TestFunctionsTooLarge,
    assert_outcome,
    zip_collection,
)
from pytest_adare.guest import TestOutcome

CHECKS = """
from adare_guest.testfunctions import testfunction

@testfunction
def greets(ctx, name):
    ctx.fail_if(name != "world", f"unexpected name {name!r}")
    with open(__file__.replace("checks.py", "data/greeting.txt")) as greeting:
        return greeting.read()
"""


def make_collection(parent: Path, name: str = "checks", source: str = CHECKS) -> Path:
    directory = parent / name
    (directory / "data").mkdir(parents=True)
    (directory / f"{name}.py").write_text(source)
    (directory / "data" / "greeting.txt").write_text("hello")
    (directory / "__pycache__").mkdir()
    (directory / "__pycache__" / f"{name}.cpython-311.pyc").write_bytes(b"\0junk")
    return directory


def names(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_one_collection_zips_under_its_own_name_without_caches(tmp_path: Path) -> None:
    data = zip_collection(make_collection(tmp_path))
    assert names(data) == ["checks/checks.py", "checks/data/greeting.txt"]


def test_directory_of_collections_zips_each_collection(tmp_path: Path) -> None:
    make_collection(tmp_path / "all", "checks")
    make_collection(tmp_path / "all", "more")
    (tmp_path / "all" / "notes").mkdir()  # not a collection: left out
    data = zip_collection(tmp_path / "all")
    assert {name.split("/")[0] for name in names(data)} == {"checks", "more"}


def test_zip_is_deterministic_whatever_the_file_times(tmp_path: Path) -> None:
    directory = make_collection(tmp_path)
    first = zip_collection(directory)
    os.utime(directory / "checks.py", (1, 1))
    assert zip_collection(directory) == first


def test_the_agent_extracts_and_runs_what_the_host_zipped(tmp_path: Path) -> None:
    data = zip_collection(make_collection(tmp_path / "src"))
    assert extract_archive(data, tmp_path / "guest") == ["checks"]
    collection = load_collection(tmp_path / "guest" / "checks")
    result = run_test_function(collection.functions["greets"], {"name": "world"}, timeout=10)
    assert (result.status, result.details) == (TestStatus.SUCCESS, ["hello"])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p.mkdir(), "holds no test-function collection"),
        (lambda p: make_collection(p.parent, "bad-name"), "not a Python identifier"),
        (lambda p: make_collection(p.parent, "syn", "def broken(:\n"), r"syn\.py:1: syntax error"),
    ],
)
def test_invalid_collections_are_refused_with_the_reason(
    tmp_path: Path, setup: object, message: str
) -> None:
    target = tmp_path / "x"
    made = setup(target)  # type: ignore[operator]
    with pytest.raises(InvalidCollection, match=message):
        zip_collection(made if isinstance(made, Path) else target)


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    directory = make_collection(tmp_path)
    (tmp_path / "shared").mkdir()
    (directory / "shared").symlink_to(tmp_path / "shared")
    with pytest.raises(InvalidCollection, match="symlinked directory"):
        zip_collection(directory)


def test_collections_over_the_message_cap_fail_clearly(tmp_path: Path) -> None:
    directory = make_collection(tmp_path)
    (directory / "data" / "blob.bin").write_bytes(os.urandom(MAX_ZIP_BYTES + 1024))
    with pytest.raises(TestFunctionsTooLarge, match=r"checks/data/blob\.bin") as caught:
        zip_collection(directory)
    assert "16 MiB" in str(caught.value)


@pytest.mark.parametrize("status", ["FAILED", "ERROR", "UNKNOWN"])
def test_bad_outcomes_fail_the_pytest_test_with_details(status: str) -> None:
    outcome = TestOutcome(status, ["/tmp/r.pdf is missing", "second line"])
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_outcome(outcome, "checks.report_written")
    assert str(caught.value) == (
        f"checks.report_written {status}:\n  /tmp/r.pdf is missing\n  second line"
    )


def test_success_passes_and_warning_warns() -> None:
    assert_outcome(TestOutcome("SUCCESS", []))
    with pytest.warns(GuestTestWarning, match="slow disk"):
        assert_outcome(TestOutcome("WARNING", ["slow disk"]))
