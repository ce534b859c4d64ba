"""The page reader of snapshot records: the column reader (the fast path) gives exactly
the entries of the field-by-field reader, on pages written by both of the agent's
listers (GNU find and the walk), and hands anything else to the field reader."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from adare_guest.fs_listing import FIND_FORMAT, entry_record
from pytest_adare.forensics.entry import (
    SnapshotFormatError,
    _records_by_column,
    _records_by_field,
    entries_from_records,
)


def awkward_tree(root: Path) -> Path:
    """Files with spaces, newlines, non-UTF-8 bytes, links (good and dangling), a FIFO."""
    (root / "dir with space").mkdir()
    (root / "dir with space" / "new\nline").write_bytes(b"x")
    (root / "plain").write_text("hello")
    os.mkfifo(root / "fifo")
    (root / "link").symlink_to("plain")
    (root / "dangling").symlink_to("/nowhere/at all")
    (root / os.fsdecode(b"latin\xe9")).write_bytes(b"")
    os.chmod(root / "plain", 0o4755)
    return root


def walk_page(root: Path) -> str:
    """The records the agent's walk writes for ``root``'s entries."""
    records = b""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            target = os.readlink(path).encode() if os.path.islink(path) else b""
            records += entry_record(path, os.lstat(path), None, target)
    return records.decode("utf-8", "surrogateescape")


def find_page(root: Path) -> str:
    argv = ["find", str(root), "-mindepth", "1", "-printf", FIND_FORMAT.replace("\\\\", "\\")]
    out = subprocess.run(argv, capture_output=True, check=True).stdout
    return out.decode("utf-8", "surrogateescape")


@pytest.mark.skipif(shutil.which("find") is None, reason="needs GNU find")
def test_find_pages_read_by_columns_equal_the_field_reader(tmp_path: Path) -> None:
    page = find_page(awkward_tree(tmp_path))
    fast = _records_by_column(page)
    assert fast is not None, "a find page must take the column path"
    assert fast == list(_records_by_field(page))
    assert len(fast) == 7


def test_walk_pages_read_by_columns_equal_the_field_reader(tmp_path: Path) -> None:
    page = walk_page(awkward_tree(tmp_path))
    fast = _records_by_column(page)
    assert fast is not None
    assert fast == list(_records_by_field(page))
    entries = dict(fast)
    assert entries[str(tmp_path / "link")].target == "plain"
    assert entries[str(tmp_path / "plain")].mode & 0o7777 == 0o4755


@pytest.mark.skipif(shutil.which("find") is None, reason="needs GNU find")
def test_a_find_page_led_by_the_agents_root_record_takes_the_column_path(
    tmp_path: Path,
) -> None:
    # The agent writes the root's record itself (nine-digit fractions) before find's
    # (ten): the first page of every find snapshot mixes the two widths.
    root = awkward_tree(tmp_path)
    page = entry_record(str(root), os.lstat(root), None, b"").decode() + find_page(root)
    fast = _records_by_column(page)
    assert fast is not None, "the first page of a find snapshot must take the column path"
    assert fast == list(_records_by_field(page))
    assert len(fast) == 8


def test_recorded_usr_listing_reads_the_same_both_ways() -> None:
    if shutil.which("find") is None or not os.path.isdir("/usr/share/doc"):
        pytest.skip("needs GNU find and /usr/share/doc")
    page = find_page(Path("/usr/share/doc"))
    assert _records_by_column(page) == list(_records_by_field(page))


@pytest.mark.parametrize(
    "page",
    [
        "f 5 644 0 0 7 1.5 2.0 3.0 - /short fractions\0\0",
        "f 5 644 0 0 7 1 2 3 - /no fractions\0\0",
        "f +5 644 0 0 7 1.500000000 2.000000000 3.000000000 - /signed\0\0",
        "x 5 644 0 0 7 1.500000000 2.000000000 3.0000000001 - /odd letter\0\0",
    ],
)
def test_pages_the_fast_reader_declines_still_read_as_before(page: str) -> None:
    assert list(entries_from_records(page)) == list(_records_by_field(page))


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("f 5 644 0 0 7 1.500000000 2.0 3.0 abc /bad digest\0\0", "bad sha256"),
        ("f five 644 0 0 7 1.5 2.0 3.0 - /p\0\0", "record 1"),
        ("f 5 644 0 0 7 1.5 2.0 3.0 - /p\0", "whole"),
        ("f 5 644 0 0 7 1.5x 2.0 3.0 - /p\0\0", "bad time"),
    ],
)
def test_malformed_pages_are_refused_with_the_field_readers_message(
    page: str, message: str
) -> None:
    with pytest.raises(SnapshotFormatError, match=message):
        list(entries_from_records(page))


def test_reading_a_page_leaves_the_collector_as_it_found_it() -> None:
    import gc

    page = "f 5 644 0 0 7 1.500000000 2.000000000 3.000000001 - /a\0\0"
    assert gc.isenabled()
    list(entries_from_records(page))
    with pytest.raises(SnapshotFormatError):
        list(entries_from_records("f 5 644 0 0 7 1.5x 2.0 3.0 - /p\0\0"))
    assert gc.isenabled()
    gc.disable()
    try:
        list(entries_from_records(page))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_equal_modes_and_times_are_held_once() -> None:
    page = "".join(
        f"f 5 644 0 0 {n} 1.500000000 1.500000000 1.500000000 - /f{n}\0\0" for n in range(3)
    )
    entries = [entry for _path, entry in entries_from_records(page)]
    assert len({id(e.mode) for e in entries}) == 1
    assert all(e.atime is e.mtime and e.ctime is e.mtime for e in entries)
