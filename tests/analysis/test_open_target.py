"""open_target over a real ext4 export: Dissect's own plugins read it, nothing changes it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_adare.analysis import EvidenceUnreadable, open_target, plain_record
from tests.analysis.conftest import HOME, Disk


def test_dissect_reads_the_trash_and_the_recently_used_list_of_the_export(
    desktop_disk: Disk,
) -> None:
    target = open_target(desktop_disk.path)
    assert target.os == "linux"
    trash = [plain_record(r) for r in target.trash()]
    assert [(r["path"], r["deleted_path"]) for r in trash] == [
        (f"{HOME}/Documents/report.txt", f"{HOME}/.local/share/Trash/files/report.txt")
    ]
    assert trash[0]["ts"] == desktop_disk.deleted_at.isoformat()
    hrefs = {plain_record(r)["href"] for r in target.recently_used()}
    assert hrefs == {f"file://{HOME}/Documents/notes.txt"}


def test_opening_the_export_leaves_it_as_it_was(desktop_disk: Disk) -> None:
    before = hashlib.sha256(desktop_disk.path.read_bytes()).hexdigest()
    assert not desktop_disk.path.stat().st_mode & 0o222  # read-only: opening needs no write
    list(open_target(desktop_disk.path).trash())
    assert hashlib.sha256(desktop_disk.path.read_bytes()).hexdigest() == before


def test_a_missing_export_is_named(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnreadable, match=f"no disk export at {tmp_path}/gone.raw"):
        open_target(tmp_path / "gone.raw")


def test_a_directory_is_not_an_export(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnreadable, match="no disk export at"):
        open_target(tmp_path)


def test_a_file_with_no_file_system_is_refused_with_the_reason(tmp_path: Path) -> None:
    junk = tmp_path / "junk.raw"
    junk.write_bytes(b"\x00not a disk\xff" * 4096)
    with pytest.raises(EvidenceUnreadable, match=r"no file system it can read on .*junk\.raw"):
        open_target(junk)
