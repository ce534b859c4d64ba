"""Writers (and the JSON reader) for ``FsDiff.export``.

- ``json``: ``{format, version, metadata, summary, changes:[...]}``, ASCII
  only (non-UTF-8 names as ``\\udcXX`` escapes, read back losslessly).
- ``csv``: one row per change (``path, change, type, field, before, after``);
  a modification of three fields is three rows. A cell that starts with ``=``,
  ``+``, ``-``, ``@``, a tab or a CR gets a ``'`` in front (guest-made text such
  as a symlink target ``=HYPERLINK(...)`` is never run as a spreadsheet formula).
- ``bodyfile``: The Sleuth Kit / mactime 3.x lines
  ``MD5|name|inode|mode_as_string|uid|gid|size|atime|mtime|ctime|crtime``
  with the name annotated `` (ADDED)``, `` (REMOVED)`` or
  `` (MODIFIED: fields)``. ``%``, ``|``, CR and LF in names are
  percent-encoded so every line has exactly 11 fields.
- ``case``: CASE/UCO JSON-LD (:mod:`pytest_adare.forensics.case`).
"""

from __future__ import annotations

import csv
import json
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from pytest_adare.forensics import case
from pytest_adare.forensics.entry import (
    Entry,
    SnapshotFormatError,
    entry_from_meta,
    entry_to_meta,
)

FieldPair = tuple[Any, Any]


class DiffLike(Protocol):
    """What the writers read of a diff (``FsDiff`` fits; kept structural so this
    module does not import the class that calls it)."""

    @property
    def created(self) -> frozenset[str]: ...
    @property
    def deleted(self) -> frozenset[str]: ...
    @property
    def modified(self) -> Mapping[str, Mapping[str, FieldPair]]: ...
    @property
    def timestamps_only(self) -> frozenset[str]: ...

    before_entries: dict[str, Entry]
    after_entries: dict[str, Entry]
    metadata: dict[str, Any]

    def entry(self, path: str) -> Entry | None: ...


class DiffFields(NamedTuple):
    """A diff read back from a ``json`` export: the constructor arguments of ``FsDiff``."""

    created: list[str]
    deleted: list[str]
    modified: dict[str, dict[str, FieldPair]]
    before_entries: dict[str, Entry]
    after_entries: dict[str, Entry]
    metadata: dict[str, Any]


DIFF_FORMAT = "adare-fs-diff"
DIFF_FORMAT_VERSION = 1
CSV_COLUMNS = ("path", "change", "type", "field", "before", "after")
BODYFILE_FIELDS = 11
_TSK_TYPE_LETTER = {"file": "r", "dir": "d", "symlink": "l"}
_NAME_ESCAPES = {"%": "%25", "|": "%7C", "\n": "%0A", "\r": "%0D"}


def _changes(diff: DiffLike) -> Iterator[tuple[str, str]]:
    """(path, change) for every change, sorted by path."""
    tagged = [(p, "created") for p in diff.created] + [(p, "deleted") for p in diff.deleted]
    tagged += [(p, "modified") for p in diff.modified]
    return iter(sorted(tagged))


def write_json(diff: DiffLike, target: Path) -> None:
    """The ``json`` export: metadata, summary counts, and every change with its entries."""
    changes: list[dict[str, Any]] = []
    timestamps_only = diff.timestamps_only
    for path, change in _changes(diff):
        item: dict[str, Any] = {"path": path, "change": change}
        if change == "modified":
            item["fields"] = {name: list(pair) for name, pair in diff.modified[path].items()}
            item["timestamps_only"] = path in timestamps_only
        if path in diff.before_entries:
            item["before"] = entry_to_meta(diff.before_entries[path])
        if path in diff.after_entries:
            item["after"] = entry_to_meta(diff.after_entries[path])
        changes.append(item)
    document = {
        "format": DIFF_FORMAT,
        "version": DIFF_FORMAT_VERSION,
        "metadata": {**diff.metadata, "exported_at": time.time()},
        "summary": {
            "created": len(diff.created),
            "deleted": len(diff.deleted),
            "modified": len(diff.modified),
            "timestamps_only": len(timestamps_only),
        },
        "changes": changes,
    }
    with open(target, "w", encoding="ascii") as out:
        json.dump(document, out, indent=1)


def read_json(source: Path) -> DiffFields:
    """Read a ``json`` export back: the fields of an ``FsDiff`` (entries and metadata included).

    :raise SnapshotFormatError: not a diff export, or a malformed change.
    """
    with open(source, encoding="ascii") as stream:
        document = json.load(stream)
    if not isinstance(document, dict) or document.get("format") != DIFF_FORMAT:
        raise SnapshotFormatError(f"{source}: not an {DIFF_FORMAT} export")
    created: list[str] = []
    deleted: list[str] = []
    modified: dict[str, dict[str, FieldPair]] = {}
    before: dict[str, Entry] = {}
    after: dict[str, Entry] = {}
    for item in document.get("changes", []):
        path, change = item.get("path"), item.get("change")
        if not isinstance(path, str) or change not in {"created", "deleted", "modified"}:
            raise SnapshotFormatError(f"{source}: bad change {item!r}")
        if change == "created":
            created.append(path)
        elif change == "deleted":
            deleted.append(path)
        else:
            modified[path] = {name: (pair[0], pair[1]) for name, pair in item["fields"].items()}
        if "before" in item:
            before[path] = entry_from_meta(path, item["before"])
        if "after" in item:
            after[path] = entry_from_meta(path, item["after"])
    metadata = dict(document.get("metadata", {}))
    metadata.pop("exported_at", None)
    return DiffFields(created, deleted, modified, before, after, metadata)


def write_csv(diff: DiffLike, target: Path) -> None:
    """The ``csv`` export: a header row, then one row per change (per field when modified)."""
    with open(target, "w", newline="", encoding="utf-8", errors="surrogateescape") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for path, change in _changes(diff):
            entry = diff.entry(path)
            kind = entry.kind if entry else ""
            if change != "modified":
                writer.writerow(map(spreadsheet_safe, [path, change, kind, "", "", ""]))
                continue
            for name, (old, new) in diff.modified[path].items():
                row = [path, change, kind, name, _csv_value(old), _csv_value(new)]
                writer.writerow(map(spreadsheet_safe, row))


def _csv_value(value: Any) -> str:
    return "" if value is None else str(value)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes Excel, LibreOffice and Google Sheets read a cell as a formula (OWASP)."""


def spreadsheet_safe(cell: str) -> str:
    """``cell`` with a ``'`` in front when a spreadsheet would take it for a formula.

    >>> spreadsheet_safe("=1+1"), spreadsheet_safe("/etc/hosts")
    ("'=1+1", '/etc/hosts')
    """
    return f"'{cell}" if cell.startswith(FORMULA_STARTS) else cell


def write_bodyfile(diff: DiffLike, target: Path) -> None:
    """The ``bodyfile`` export, one mactime 3.x line per changed path."""
    with open(target, "w", newline="\n", encoding="utf-8", errors="surrogateescape") as out:
        for path, change in _changes(diff):
            entry = diff.entry(path)
            if entry is None:
                continue
            if change == "modified":
                label = f"MODIFIED: {','.join(diff.modified[path])}"
            else:
                label = "ADDED" if change == "created" else "REMOVED"
            out.write(bodyfile_line(f"{escape_bodyfile_name(path)} ({label})", entry) + "\n")


def bodyfile_line(name: str, entry: Entry) -> str:
    """``MD5|name|inode|mode_as_string|uid|gid|size|atime|mtime|ctime|crtime`` (MD5 unknown: 0)."""
    fields = [
        "0",
        name,
        str(entry.inode),
        tsk_mode_string(entry),
        str(entry.uid),
        str(entry.gid),
        str(entry.size),
        *(str(int(stamp or 0)) for stamp in (entry.atime, entry.mtime, entry.ctime, entry.crtime)),
    ]
    return "|".join(fields)


def escape_bodyfile_name(name: str) -> str:
    """Percent-encode ``%``, ``|``, CR and LF so a name cannot break the line format."""
    return "".join(_NAME_ESCAPES.get(char, char) for char in name)


def tsk_mode_string(entry: Entry) -> str:
    """The Sleuth Kit mode string, e.g. ``r/rrw-r--r--``, ``d/drwxr-xr-x``, ``l/lrwxrwxrwx``."""
    perms = stat.filemode(entry.mode)
    letter = _TSK_TYPE_LETTER.get(entry.kind) or (perms[0] if perms[0] in "pcbs" else "-")
    return f"{letter}/{letter}{perms[1:]}"


def write_case(diff: DiffLike, target: Path) -> None:
    """CASE/UCO JSON-LD (see :mod:`pytest_adare.forensics.case`)."""
    case.write_graph(case.diff_graph(diff, tool_version=case.tool_version()), target)


WRITERS: dict[str, Callable[[DiffLike, Path], None]] = {
    "json": write_json,
    "csv": write_csv,
    "bodyfile": write_bodyfile,
    "case": write_case,
}
