"""A snapshot's entries as columns: every entry reads back as it was given (hostile values
too), a path given again takes the new entry, a diff over columns finds what a diff over
the entries themselves finds, and a later snapshot of a tree shares the earlier's paths."""

from __future__ import annotations

import math
import random
import sys
import tracemalloc

import pytest

from pytest_adare.forensics import entry_table
from pytest_adare.forensics.diff import changed_fields
from pytest_adare.forensics.entry import Entry
from pytest_adare.forensics.entry_table import EntryTable
from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotPages


def entry(**fields: object) -> Entry:
    base = Entry("file", 3, 0o100644, 1000, 1000, 7, 1.5, 2.5, 3.5, None, None, None)
    return base._replace(**fields)


@pytest.mark.parametrize(
    "odd",
    [
        entry(uid=2**70),  # no 64-bit column holds it
        entry(mode=-1),
        entry(size=-(2**64)),
        entry(mtime=-math.inf),  # what a column's None is
        entry(atime=math.nan),
        entry(kind="socket"),  # no kind code
        entry(kind="symlink", target="/etc/passwd", sha256="ab" * 32, crtime=0.25),
    ],
)
def test_every_entry_reads_back_as_it_was_given(odd: Entry) -> None:
    plain = entry()
    table = EntryTable([("/plain", plain), ("/odd", odd), ("/after", plain)])
    got = table["/odd"]
    assert got == odd or (math.isnan(got.atime or 0) and math.isnan(odd.atime or 0))
    assert table["/plain"] == table["/after"] == plain
    assert type(table["/plain"].size) is int and table["/plain"].crtime is None


def test_a_path_given_again_takes_the_new_entry_as_a_dict_would() -> None:
    table = EntryTable([("/a", entry()), ("/b", entry())])
    assert table.extend([("/a", entry(size=9, uid=2**70)), ("/c", entry())]) == 1
    assert table["/a"] == entry(size=9, uid=2**70) and len(table) == 3
    table.extend([("/a", entry(size=10))])
    assert table["/a"] == entry(size=10)
    assert dict(table) == {"/a": entry(size=10), "/b": entry(), "/c": entry()}
    assert table == {"/a": entry(size=10), "/b": entry(), "/c": entry()}


def _reference_modified(old: dict[str, Entry], new: dict[str, Entry]) -> dict[str, object]:
    found = {}
    for path in old.keys() & new.keys():
        if old[path] != new[path] and (changes := changed_fields(old[path], new[path])):
            found[path] = changes
    return found


@pytest.mark.parametrize("seed", range(5))
def test_a_diff_over_columns_finds_what_one_over_the_entries_finds(seed: int) -> None:
    rng = random.Random(seed)
    old = {f"/t/f{i}": entry(size=i, inode=i, mtime=float(i)) for i in range(400)}
    new = dict(old)
    for path in rng.sample(sorted(old), 40):  # every field, one at a time, some twice
        name = rng.choice(Entry._fields[1:])
        value = {
            "sha256": "cd" * 32, "target": "/x", "uid": 2**70, "atime": 99.0,
            "crtime": 5.0, "inode": 10**6,
        }.get(name, 12345)  # fmt: skip
        new[path] = new[path]._replace(**{name: value})
    for path in rng.sample(sorted(old), 10):
        del new[path]
    new["/t/created"] = entry()
    before, after = FsSnapshot("/t", old), FsSnapshot("/t", new)
    diff = after.diff(before)
    assert dict(diff.modified) == _reference_modified(old, new)
    assert diff.created == {"/t/created"} and len(diff.deleted) == 10


def test_a_later_snapshot_of_the_tree_shares_the_earlier_ones_paths() -> None:
    def page(size: int) -> dict[str, object]:
        records = "".join(f"f {size} 644 0 0 {i} 1.5 1.5 1.5 - /t/file-{i}\0\0" for i in range(50))
        return {"status": "success", "format": "lines", "cursor": None,
                "records": records, "entries": 50}  # fmt: skip

    first = SnapshotPages("/t")
    first.add(page(1))
    before = first.snapshot()
    second = SnapshotPages("/t", like=before)
    second.add(page(2))
    after = second.snapshot()
    assert isinstance(before.entries, EntryTable) and isinstance(after.entries, EntryTable)
    for path in before:
        assert after.entries.shared_path(path) is before.entries.shared_path(path)
    assert len(after.diff(before).modified) == 50


def test_a_later_snapshot_holds_no_row_number_of_its_own_where_the_earlier_has_it() -> None:
    # Rows above 256 (CPython's small ints are shared anyway), in another order, some new.
    earlier = EntryTable((f"/t/f{i}", entry(inode=i)) for i in range(1000))
    paths = [f"/t/f{i}" for i in reversed(range(1000))] + ["/t/new-1", "/t/new-2"]
    later = EntryTable()
    later.extend_columns(
        paths, list(zip(*(entry(inode=7) for _ in paths), strict=True)), like=earlier
    )
    theirs = {row: row for row in earlier._rows.values()}
    assert all(row is theirs[row] for row in later._rows.values() if row < 1000)
    assert sorted(later._rows.values()) == list(range(1002))
    assert later["/t/f0"] == entry(inode=7) and later["/t/new-2"] == entry(inode=7)


def test_a_diff_gathers_the_paths_that_differ_not_a_set_of_every_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Small column chunks, so what the diff holds at once is what it gathers beside them.
    monkeypatch.setattr(entry_table, "DIFF_CHUNK", 1024)
    size = 50_000
    old = EntryTable((f"/t/some/longer/dir/f{i}", entry(inode=i)) for i in range(size))
    new = EntryTable(
        ((f"/t/some/longer/dir/f{i}", entry(inode=i)) for i in range(size)),
    )
    before, after = FsSnapshot("/t", old), FsSnapshot("/t", new)
    a_set_of_every_path = sys.getsizeof(set(old))
    tracemalloc.start()
    try:
        diff = after.diff(before)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not diff.created and not diff.deleted and not diff.modified
    assert peak < a_set_of_every_path / 2, (peak, a_set_of_every_path)


def test_a_time_held_by_no_row_yet_reads_back_once_one_has_it() -> None:
    # No column is held for a time every row lacks (crtime, nearly always): the first
    # value makes it, with None for the rows before.
    table = EntryTable((f"/t/f{i}", entry(inode=i)) for i in range(300))
    assert table["/t/f7"].crtime is None
    table.extend([("/t/born", entry(crtime=5.0)), ("/t/later", entry())])
    table.extend([("/t/f7", entry(atime=None, crtime=9.5))])  # a row replaced in place
    assert table["/t/born"].crtime == 5.0 and table["/t/later"].crtime is None
    assert table["/t/f7"] == entry(atime=None, crtime=9.5) and table["/t/f8"].crtime is None
    # A diff's columns: one of all None (no mtime anywhere) against one that has some.
    paths = [f"/t/f{i}" for i in range(300)]
    timeless = EntryTable((path, entry(mtime=None)) for path in paths)
    touched = EntryTable((path, entry(mtime=None)) for path in paths)
    touched.extend([("/t/f7", entry(mtime=4.0))])
    assert timeless.differing(touched, paths) == ["/t/f7"]
    assert touched.differing(timeless, paths) == ["/t/f7"]
    assert timeless.differing(EntryTable((p, entry(mtime=None)) for p in paths), paths) == []


def test_a_path_twice_in_one_batch_keeps_the_later_entry() -> None:
    table = EntryTable()
    assert table.extend([("/a", entry()), ("/b", entry()), ("/a", entry(size=5))]) == 2
    assert table["/a"] == entry(size=5) and list(table) == ["/a", "/b"]
