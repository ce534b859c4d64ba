"""Guest-made values that once escaped the documented errors or reached a spreadsheet as
formulas: an mtime no float holds, and CSV cells that start like a formula."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_adare.forensics.entry import Entry, SnapshotFormatError, entries_from_records
from pytest_adare.forensics.snapshot import FsSnapshot

HUGE = 10**400


def test_an_mtime_beyond_any_float_in_records_is_a_format_error() -> None:
    record = f"f 3 644 0 0 9 {HUGE}.5 2.0 3.0 - /a\0\0"
    with pytest.raises(SnapshotFormatError, match=r"record 1 .*out of range"):
        dict(entries_from_records(record))


def test_an_mtime_beyond_any_float_in_a_json_result_is_a_format_error() -> None:
    result = {"status": "success", "snapshot": {"/a": {"type": "file", "mtime": HUGE}}}
    with pytest.raises(SnapshotFormatError, match=r"mtime is out of range"):
        FsSnapshot.from_result(result, root="/")


@pytest.mark.parametrize("value", [HUGE, "NaN", "Infinity"], ids=["10**400", "NaN", "inf"])
def test_a_saved_snapshot_with_an_impossible_time_is_a_format_error(
    tmp_path: Path, value: object
) -> None:
    saved = FsSnapshot(
        "/", {"/a": Entry("file", 1, 0o100644, 0, 0, 1, 1.0, 1.0, 1.0, None, None, None)}
    )
    path = saved.save(tmp_path / "s.jsonl")
    header, line = path.read_text().splitlines()
    row = json.loads(line)
    row[7] = value  # mtime
    text = json.dumps(row).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    path.write_text(f"{header}\n{text}\n")
    with pytest.raises(SnapshotFormatError, match=r"line 2: mtime"):
        FsSnapshot.load(path)


def test_a_saved_snapshot_header_with_an_impossible_time_is_a_format_error(
    tmp_path: Path,
) -> None:
    path = FsSnapshot("/", {}).save(tmp_path / "s.jsonl")
    header = json.loads(path.read_text().splitlines()[0])
    header["taken_at_host"] = HUGE
    path.write_text(json.dumps(header) + "\n")
    with pytest.raises(SnapshotFormatError, match=r"taken_at_host"):
        FsSnapshot.load(path)
    for field in ("taken_at_guest", "collection_time"):
        header = {**json.loads(FsSnapshot("/", {}).save(path).read_text()), field: "soon"}
        path.write_text(json.dumps(header) + "\n")
        with pytest.raises(SnapshotFormatError, match=field):
            FsSnapshot.load(path)
    header = json.loads(FsSnapshot("/", {}, taken_at_guest=1.5).save(path).read_text())
    assert FsSnapshot.load(path).taken_at_guest == 1.5


def _entry(target: str | None = None, uid: int = 0) -> Entry:
    kind, mode = ("symlink", 0o120777) if target else ("file", 0o100644)
    return Entry(kind, 1, mode, uid, 0, 5, 1.0, 1.0, 1.0, None, None, target)


def test_csv_cells_that_start_like_a_formula_are_quoted_for_spreadsheets(
    tmp_path: Path,
) -> None:
    before = FsSnapshot("/", {"/l": _entry("a"), "/u": _entry(uid=0)})
    after = FsSnapshot(
        "/",
        {
            "/l": _entry('=HYPERLINK("http://evil/","x")'),
            "/u": _entry(uid=-1),
            "@cmd": _entry(),
            "+1": _entry(),
            "\tx": _entry(),
            "\rx": _entry(),
        },
    )
    path = after.diff(before).export(tmp_path / "diff.csv")
    with path.open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    cells = {(row["path"], row["field"]): row for row in rows}
    link = cells[("/l", "target")]
    assert link["before"] == "a"
    assert link["after"] == '\'=HYPERLINK("http://evil/","x")'
    assert cells[("/u", "uid")]["after"] == "'-1"
    assert {row["path"] for row in rows if row["change"] == "created"} == {
        "'@cmd", "'+1", "'\tx", "'\rx"
    }  # fmt: skip
    assert not [c for row in rows for c in row.values() if c[:1] in "=+-@\t\r" and c]
