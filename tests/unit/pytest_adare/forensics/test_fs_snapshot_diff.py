"""FsSnapshot / FsDiff semantics on snapshots built like the guest tool's results."""

from __future__ import annotations

import copy
import hashlib
import tracemalloc
from typing import Any

import pytest

from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotFormatError

T0 = 1_760_000_000.0


def meta(
    kind: str = "file",
    *,
    size: int = 10,
    mode: int = 0o100644,
    uid: int = 1000,
    gid: int = 1000,
    inode: int = 1,
    mtime: float = T0,
    ctime: float = T0,
    atime: float = T0,
    **extra: Any,
) -> dict[str, Any]:
    """One ``meta`` dict in the shape of ``get_filesystem_snapshot``."""
    return {
        "type": kind,
        "size": size,
        "mtime": mtime,
        "mode": mode,
        "uid": uid,
        "gid": gid,
        "inode": inode,
        "timestamps": {"modified": mtime, "accessed": atime, "changed": ctime},
        **extra,
    }


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def result(entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "status": "success",
        "snapshot": entries,
        "file_count": len(entries),
        "collection_time": 0.01,
    }


def snap(entries: dict[str, dict[str, Any]], **kwargs: Any) -> FsSnapshot:
    return FsSnapshot.from_result(result(copy.deepcopy(entries)), root="/home/user", **kwargs)


BASE = {
    "/home/user": meta("dir", size=4096, mode=0o40755, inode=2),
    "/home/user/report.pdf": meta(size=5, inode=3, sha256=sha("hello")),
    "/home/user/notes.txt": meta(size=3, inode=4, sha256=sha("abc")),
    "/home/user/link": meta("symlink", size=10, mode=0o120777, inode=5, target="notes.txt"),
}


def changed(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entries = copy.deepcopy(BASE)
    for path, fields in changes.items():
        entries[path.replace("__", "/")].update(fields)
    return entries


def test_deleting_a_file_shows_it_in_deleted_only() -> None:
    before = snap(BASE)
    after_entries = copy.deepcopy(BASE)
    del after_entries["/home/user/report.pdf"]
    diff = snap(after_entries).diff(before)
    assert diff.deleted == {"/home/user/report.pdf"}
    assert diff.created == set() and diff.modified == {}
    assert diff.before_entries["/home/user/report.pdf"].size == 5


def test_creating_a_file_and_a_directory_shows_both_in_created() -> None:
    entries = copy.deepcopy(BASE)
    entries["/home/user/new"] = meta("dir", size=4096, mode=0o40700, inode=9)
    entries["/home/user/new/a"] = meta(size=0, inode=10)
    diff = snap(entries).diff(snap(BASE))
    assert diff.created == {"/home/user/new", "/home/user/new/a"}
    assert diff.after_entries["/home/user/new"].kind == "dir"
    assert not diff.deleted


def test_same_size_content_change_is_caught_by_sha256() -> None:
    after = snap(changed(**{"/home/user/notes.txt": {"sha256": sha("xyz")}}))
    diff = after.diff(snap(BASE))
    assert diff.modified == {"/home/user/notes.txt": {"sha256": (sha("abc"), sha("xyz"))}}
    assert diff.timestamps_only == set()


def test_sha256_is_compared_only_when_both_sides_hashed() -> None:
    unhashed = copy.deepcopy(BASE)
    del unhashed["/home/user/notes.txt"]["sha256"]
    assert not snap(unhashed).diff(snap(BASE))


def test_chmod_and_chown_are_mode_uid_gid_changes() -> None:
    after = snap(
        changed(
            **{
                "/home/user/report.pdf": {
                    "mode": 0o100600,
                    "uid": 0,
                    "gid": 0,
                    "timestamps": {"modified": T0, "accessed": T0, "changed": T0 + 5},
                }
            }
        )
    )
    fields = after.diff(snap(BASE)).modified["/home/user/report.pdf"]
    assert fields == {
        "mode": (0o100644, 0o100600),
        "uid": (1000, 0),
        "gid": (1000, 0),
        "ctime": (T0, T0 + 5),
    }


def test_symlink_retarget_is_a_target_change() -> None:
    after = snap(changed(**{"/home/user/link": {"target": "report.pdf"}}))
    assert after.diff(snap(BASE)).modified == {
        "/home/user/link": {"target": ("notes.txt", "report.pdf")}
    }


def test_file_replaced_by_directory_is_a_type_change() -> None:
    after = snap(changed(**{"/home/user/notes.txt": {"type": "dir", "mode": 0o40755}}))
    fields = after.diff(snap(BASE)).modified["/home/user/notes.txt"]
    assert fields["type"] == ("file", "dir")


def test_touch_is_reported_as_timestamps_only() -> None:
    stamps = {"modified": T0 + 1, "accessed": T0 + 1, "changed": T0 + 1}
    after = snap(changed(**{"/home/user/notes.txt": {"mtime": T0 + 1, "timestamps": stamps}}))
    diff = after.diff(snap(BASE))
    assert diff.timestamps_only == {"/home/user/notes.txt"}
    assert diff.substantive == {}
    assert diff.modified["/home/user/notes.txt"].keys() == {"mtime", "ctime"}


def test_size_change_with_new_mtime_is_substantive() -> None:
    after = snap(changed(**{"/home/user/notes.txt": {"size": 4, "mtime": T0 + 1}}))
    diff = after.diff(snap(BASE))
    assert diff.timestamps_only == set()
    assert diff.substantive["/home/user/notes.txt"]["size"] == (3, 4)


def test_reading_a_file_changes_nothing() -> None:
    stamps = {"modified": T0, "accessed": T0 + 100, "changed": T0}
    after = snap(changed(**{"/home/user/notes.txt": {"timestamps": stamps}}))
    diff = after.diff(snap(BASE))
    assert diff == FsDiff.empty()
    assert not diff


def test_diff_compares_equal_to_an_expected_diff() -> None:
    entries = copy.deepcopy(BASE)
    entries["/home/user/x"] = meta(inode=20)
    assert snap(entries).diff(snap(BASE)) == FsDiff(created={"/home/user/x"})
    assert snap(entries).diff(snap(BASE)) != FsDiff.empty()


def test_iso_timestamps_and_octal_mode_strings_are_accepted() -> None:
    entry = meta(mode="100600", mtime="2025-01-01T00:00:00Z")  # type: ignore[arg-type]
    entry["timestamps"]["modified"] = "2025-01-01T00:00:00+00:00"
    parsed = snap({"/a": entry})["/a"]
    assert parsed.mode == 0o100600
    assert parsed.mtime == 1735689600.0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"type": "socket"}, "type must be one of"),
        ({"size": "big"}, "size is not an integer"),
        ({"mtime": "yesterday"}, "mtime is not a timestamp"),
        ({"sha256": 5}, "sha256 is not a string"),
    ],
)
def test_malformed_metadata_names_the_path_and_field(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(SnapshotFormatError, match=message) as caught:
        snap({"/etc/x": {**meta(), **bad}})
    assert "/etc/x" in str(caught.value)


def test_failed_tool_result_is_a_clear_error() -> None:
    with pytest.raises(SnapshotFormatError, match="permission denied"):
        FsSnapshot.from_result({"status": "error", "message": "permission denied"}, root="/")


def test_consume_empties_the_tool_result_while_reading() -> None:
    raw = result(copy.deepcopy(BASE))
    snapshot = FsSnapshot.from_result(raw, root="/home/user", consume=True)
    assert raw["snapshot"] == {} and len(snapshot) == len(BASE)


def test_save_and_load_round_trip_including_non_utf8_names(tmp_path: Any) -> None:
    entries = copy.deepcopy(BASE)
    entries["/home/user/caf\udce9"] = meta(inode=30)  # b"caf\xe9" via surrogateescape
    original = snap(entries, os="linux", taken_at_guest=T0 + 3, taken_at_host=T0 + 4)
    for name in ("snap.jsonl", "snap.jsonl.gz"):
        loaded = FsSnapshot.load(original.save(tmp_path / name))
        assert dict(loaded) == dict(original)
        assert (loaded.root, loaded.os, loaded.taken_at_guest, loaded.taken_at_host) == (
            "/home/user",
            "linux",
            T0 + 3,
            T0 + 4,
        )
    raw = (tmp_path / "snap.jsonl").read_bytes()
    assert b"caf\\udce9" in raw  # JSON escape, not a crash or a lossy replacement


def test_loading_a_truncated_snapshot_file_fails_clearly(tmp_path: Any) -> None:
    path = snap(BASE).save(tmp_path / "s.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(SnapshotFormatError, match="truncated"):
        FsSnapshot.load(path)


def test_hundred_thousand_entries_stay_compact_and_diff_quickly() -> None:
    count = 100_000
    entries = {f"/usr/share/f{i}": meta(size=i, inode=i, mtime=T0 + i) for i in range(count)}
    tracemalloc.start()
    snapshot = FsSnapshot.from_result(result(entries), root="/usr", consume=True)
    current, _peak = tracemalloc.get_traced_memory()
    print(f"{current / count:.0f} bytes per entry")
    tracemalloc.stop()
    assert current / count < 600, f"{current / count:.0f} bytes per entry"
    changed_entries = dict(snapshot.entries)
    changed_entries["/usr/share/f7"] = snapshot["/usr/share/f7"]._replace(size=1)
    diff = FsSnapshot("/usr", changed_entries).diff(snapshot)
    assert diff.modified == {"/usr/share/f7": {"size": (7, 1)}}
