"""FsDiff exports parse back: JSON (and FsDiff.from_json), CSV, 11-field bodyfile lines."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry import Entry
from pytest_adare.forensics.export import escape_bodyfile_name
from pytest_adare.forensics.snapshot import FsSnapshot

T0 = 1_760_000_000.25


def entry(
    kind: str = "file",
    size: int = 10,
    mode: int = 0o100644,
    uid: int = 1000,
    mtime: float = T0,
    ctime: float = T0,
    sha256: str | None = None,
    target: str | None = None,
    inode: int = 7,
) -> Entry:
    return Entry(kind, size, mode, uid, 1000, inode, mtime, T0 - 5, ctime, T0 - 10, sha256, target)


BEFORE = FsSnapshot(
    "/srv",
    {
        "/srv": entry("dir", 4096, 0o40755, inode=2),
        "/srv/gone.txt": entry(size=3, inode=3),
        "/srv/app.conf": entry(size=5, sha256="a" * 64, inode=4),
        "/srv/touched": entry(inode=5),
        "/srv/link": entry("symlink", 6, 0o120777, target="app.conf", inode=6),
    },
    taken_at_host=T0,
    os="Linux",
)
AFTER = FsSnapshot(
    "/srv",
    {
        "/srv": entry("dir", 4096, 0o40755, inode=2, mtime=T0 + 1, ctime=T0 + 1),
        "/srv/app.conf": entry(size=5, sha256="b" * 64, mode=0o100600, inode=4, ctime=T0 + 1),
        "/srv/touched": entry(inode=5, mtime=T0 + 2, ctime=T0 + 2),
        "/srv/link": entry("symlink", 7, 0o120777, target="app.conf2", inode=6),
        "/srv/new|odd\nname": entry(size=1, inode=8),
        "/srv/caf\udce9": entry(size=2, inode=9),
    },
    taken_at_host=T0 + 9,
    os="Linux",
)
DIFF = AFTER.diff(BEFORE)


def test_the_example_diff_is_what_the_exports_describe() -> None:
    assert DIFF.created == {"/srv/new|odd\nname", "/srv/caf\udce9"}
    assert DIFF.deleted == {"/srv/gone.txt"}
    assert DIFF.timestamps_only == {"/srv", "/srv/touched"}
    assert DIFF.substantive.keys() == {"/srv/app.conf", "/srv/link"}


def test_json_export_has_metadata_counts_and_changes_and_reads_back(tmp_path: Path) -> None:
    path = DIFF.export(tmp_path / "diff.json")
    document = json.loads(path.read_text(encoding="ascii"))
    assert document["summary"] == {"created": 2, "deleted": 1, "modified": 4, "timestamps_only": 2}
    assert document["metadata"]["root"] == "/srv"
    assert document["metadata"]["before"]["taken_at_host"] == T0
    conf = next(c for c in document["changes"] if c["path"] == "/srv/app.conf")
    assert conf["fields"] == {
        "mode": [0o100644, 0o100600],
        "sha256": ["a" * 64, "b" * 64],
        "ctime": [T0, T0 + 1],
    }
    assert conf["timestamps_only"] is False and conf["after"]["sha256"] == "b" * 64
    loaded = FsDiff.from_json(path)
    assert loaded == DIFF
    assert loaded.after_entries == DIFF.after_entries
    assert loaded.before_entries == DIFF.before_entries


def test_csv_export_has_one_row_per_change(tmp_path: Path) -> None:
    path = DIFF.export(tmp_path / "diff.csv")
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as stream:
        rows = list(csv.DictReader(stream))
    per_path: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        per_path.setdefault(row["path"], []).append(row)
    assert len(rows) == 2 + 1 + sum(len(f) for f in DIFF.modified.values())
    assert [r["change"] for r in per_path["/srv/new|odd\nname"]] == ["created"]
    assert per_path["/srv/caf\udce9"][0]["type"] == "file"
    link = per_path["/srv/link"]
    assert {(r["field"], r["before"], r["after"]) for r in link} == {
        ("size", "6", "7"),
        ("target", "app.conf", "app.conf2"),
    }


def test_bodyfile_lines_have_eleven_fields_and_annotated_names(tmp_path: Path) -> None:
    path = DIFF.export(tmp_path / "diff.body", "bodyfile")
    raw = path.read_bytes()
    assert b"caf\xe9" in raw  # the guest's original bytes, like fls writes them
    lines = raw.decode("utf-8", "surrogateescape").splitlines()
    assert len(lines) == 7
    fields = {line.split("|")[1]: line.split("|") for line in lines}
    assert all(len(parts) == 11 for parts in fields.values())
    gone = fields["/srv/gone.txt (REMOVED)"]
    assert gone == [
        "0",
        "/srv/gone.txt (REMOVED)",
        "3",
        "r/rrw-r--r--",
        "1000",
        "1000",
        "3",
        str(int(T0 - 5)),
        str(int(T0)),
        str(int(T0)),
        str(int(T0 - 10)),
    ]
    assert fields["/srv/new%7Codd%0Aname (ADDED)"][3] == "r/rrw-r--r--"
    assert fields["/srv (MODIFIED: mtime,ctime)"][3] == "d/drwxr-xr-x"
    assert fields["/srv/link (MODIFIED: size,target)"][3] == "l/lrwxrwxrwx"
    assert "/srv/app.conf (MODIFIED: mode,sha256,ctime)" in fields


def test_bodyfile_name_escaping_is_reversible() -> None:
    name = "a%7C|b\r\nc"
    escaped = escape_bodyfile_name(name)
    assert "|" not in escaped and "\n" not in escaped
    assert (
        escaped.replace("%0A", "\n").replace("%0D", "\r").replace("%7C", "|").replace("%25", "%")
        == name
    )


def test_unknown_export_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"one of \('json', 'csv', 'bodyfile', 'case'\)"):
        DIFF.export(tmp_path / "diff.xml")


@pytest.mark.parametrize("fmt", ["json", "csv", "bodyfile"])
def test_export_creates_missing_parent_directories(tmp_path: Path, fmt: str) -> None:
    target = tmp_path / "out" / "run 1" / f"diff.{fmt}"
    assert DIFF.export(target, fmt) == target
    assert target.stat().st_size > 0


def test_summary_lists_each_kind_of_change() -> None:
    text = str(DIFF)
    assert text.splitlines()[0] == (
        "FsDiff under /srv: 2 created, 1 deleted, 4 modified (2 timestamps only)"
    )
    assert "  - /srv/gone.txt  (file, 3 B, mode 0o100644, uid 1000, gid 1000)" in text
    assert "  ~ /srv/app.conf: mode 0o100644 -> 0o100600, sha256 aaaaaaaaaaaa… -> " in text
