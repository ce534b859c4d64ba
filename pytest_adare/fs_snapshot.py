"""Filesystem snapshots of a guest, compact on the host (DESIGN §3 and §5).

A snapshot is built from the ``get_filesystem_snapshot`` tool result::

    before = FsSnapshot.from_result(result, root="/home/user")
    ...
    diff = after.diff(before)            # FsDiff: created, deleted, modified

Each path maps to one :class:`Entry` (a named tuple: no per-entry dict), so
100k+ entries cost tens of MB, not hundreds. :meth:`FsSnapshot.save` and
:meth:`FsSnapshot.load` stream JSON Lines (gzip when the name ends in ``.gz``)
one entry at a time, never one giant JSON document.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from pytest_adare.fs_assert import assertrepr_compare
from pytest_adare.fs_diff import FsDiff, diff_snapshots

__all__ = ["Entry", "FsDiff", "FsSnapshot", "SnapshotFormatError", "assertrepr_compare"]

SNAPSHOT_FORMAT = "adare-fs-snapshot"
SNAPSHOT_FORMAT_VERSION = 1
ENTRY_KINDS = ("file", "dir", "symlink", "other")


class SnapshotFormatError(ValueError):
    """A snapshot tool result or a saved snapshot file is malformed."""


class Entry(NamedTuple):
    """Metadata of one path, as the guest reported it (times are epoch seconds)."""

    kind: str
    size: int
    mode: int
    uid: int
    gid: int
    inode: int
    mtime: float
    atime: float | None
    ctime: float | None
    crtime: float | None
    sha256: str | None
    target: str | None


def _number(value: Any, what: str) -> float | None:
    """A timestamp as epoch seconds: accepts numbers and ISO 8601 strings."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SnapshotFormatError(f"{what} must be a number or ISO 8601 string, not a bool")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise SnapshotFormatError(f"{what} is not a timestamp: {value!r}")


def _integer(value: Any, what: str, *, octal_strings: bool = False) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if octal_strings and isinstance(value, str):
        try:
            return int(value, 8)
        except ValueError:
            pass
    if value is None:
        return 0
    raise SnapshotFormatError(f"{what} is not an integer: {value!r}")


def entry_from_meta(path: str, meta: Mapping[str, Any]) -> Entry:
    """Turn one ``meta`` dict of the tool result into an :class:`Entry`.

    :raise SnapshotFormatError: naming the path and the bad field.
    """
    if not isinstance(meta, Mapping):
        raise SnapshotFormatError(f"{path!r}: metadata is not an object: {meta!r}")
    kind = meta.get("type")
    if kind not in ENTRY_KINDS:
        raise SnapshotFormatError(f"{path!r}: type must be one of {ENTRY_KINDS}, got {kind!r}")
    stamps = meta.get("timestamps") or {}
    if not isinstance(stamps, Mapping):
        raise SnapshotFormatError(f"{path!r}: timestamps is not an object: {stamps!r}")
    mtime = _number(meta.get("mtime", stamps.get("modified")), f"{path!r}: mtime")
    sha256, target = meta.get("sha256"), meta.get("target")
    if sha256 is not None and not isinstance(sha256, str):
        raise SnapshotFormatError(f"{path!r}: sha256 is not a string: {sha256!r}")
    if target is not None and not isinstance(target, str):
        raise SnapshotFormatError(f"{path!r}: target is not a string: {target!r}")
    return Entry(
        kind=sys.intern(kind),
        size=_integer(meta.get("size"), f"{path!r}: size"),
        mode=_integer(meta.get("mode"), f"{path!r}: mode", octal_strings=True),
        uid=_integer(meta.get("uid"), f"{path!r}: uid"),
        gid=_integer(meta.get("gid"), f"{path!r}: gid"),
        inode=_integer(meta.get("inode"), f"{path!r}: inode"),
        mtime=mtime if mtime is not None else 0.0,
        atime=_number(stamps.get("accessed"), f"{path!r}: accessed"),
        ctime=_number(stamps.get("changed"), f"{path!r}: changed"),
        crtime=_number(stamps.get("created"), f"{path!r}: created"),
        sha256=sha256.lower() if sha256 else None,
        target=target,
    )


def entry_to_meta(entry: Entry) -> dict[str, Any]:
    """The inverse of :func:`entry_from_meta` (the tool's ``meta`` shape)."""
    stamps: dict[str, float | None] = {
        "modified": entry.mtime,
        "accessed": entry.atime,
        "changed": entry.ctime,
    }
    if entry.crtime is not None:
        stamps["created"] = entry.crtime
    meta: dict[str, Any] = {
        "type": entry.kind,
        "size": entry.size,
        "mtime": entry.mtime,
        "mode": entry.mode,
        "uid": entry.uid,
        "gid": entry.gid,
        "inode": entry.inode,
        "timestamps": stamps,
    }
    if entry.sha256 is not None:
        meta["sha256"] = entry.sha256
    if entry.target is not None:
        meta["target"] = entry.target
    return meta


@dataclass(eq=False)
class FsSnapshot(Mapping[str, Entry]):
    """The files under ``root`` of a guest at one moment; a read-only mapping path → Entry.

    ``taken_at_guest`` is the guest clock (None when unknown), ``taken_at_host``
    the host clock, both epoch seconds. ``errors`` lists the paths the guest could
    not read (``{"path", "error"}``): they are missing from ``entries``. Paths are
    the guest's own strings (non-UTF-8 bytes appear as lone surrogates, as
    ``os.fsdecode`` makes them).
    """

    root: str
    entries: dict[str, Entry]
    taken_at_host: float = field(default_factory=time.time)
    taken_at_guest: float | None = None
    os: str | None = None
    collection_time: float | None = None
    errors: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_result(
        cls,
        result: Mapping[str, Any],
        *,
        root: str,
        os: str | None = None,
        taken_at_guest: float | None = None,
        taken_at_host: float | None = None,
        consume: bool = False,
    ) -> FsSnapshot:
        """Build a snapshot from a ``get_filesystem_snapshot`` result dict.

        ``consume=True`` empties ``result["snapshot"]`` while reading it, so a
        huge result is never held twice (the facade passes it; callers that keep
        the dict should not).

        :raise SnapshotFormatError: the result is not a successful snapshot.
        """
        if result.get("status") != "success":
            raise SnapshotFormatError(
                f"snapshot of {root!r} failed: {result.get('message', result.get('status'))!r}"
            )
        raw = result.get("snapshot")
        if not isinstance(raw, dict):
            raise SnapshotFormatError(f"result has no 'snapshot' object: {type(raw).__name__}")
        entries: dict[str, Entry] = {}
        if consume:
            while raw:
                path, meta = raw.popitem()
                entries[path] = entry_from_meta(path, meta)
        else:
            for path, meta in raw.items():
                entries[path] = entry_from_meta(path, meta)
        collection_time = result.get("collection_time")
        errors = result.get("errors") or []
        return cls(
            root=root,
            entries=entries,
            taken_at_host=time.time() if taken_at_host is None else taken_at_host,
            taken_at_guest=taken_at_guest,
            os=os,
            collection_time=_number(collection_time, "collection_time"),
            errors=[dict(error) for error in errors if isinstance(error, Mapping)],
        )

    def __getitem__(self, path: str) -> Entry:
        return self.entries[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<FsSnapshot {self.root!r}: {len(self.entries)} entries>"

    def diff(self, before: FsSnapshot) -> FsDiff:
        """What changed from ``before`` to this (later) snapshot: ``after.diff(before)``."""
        return diff_snapshots(before, self)

    def header(self) -> dict[str, Any]:
        """The snapshot's metadata (everything but the entries)."""
        return {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_FORMAT_VERSION,
            "root": self.root,
            "os": self.os,
            "taken_at_guest": self.taken_at_guest,
            "taken_at_host": self.taken_at_host,
            "collection_time": self.collection_time,
            "entry_count": len(self.entries),
            "errors": self.errors,
        }

    def save(self, path: str | Path) -> Path:
        """Write JSON Lines: a header line, then one ``[path, field...]`` line per entry.

        Gzip-compressed when ``path`` ends in ``.gz``. Returns the path.
        """
        target = Path(path)
        with _open_text(target, "w") as out:
            out.write(json.dumps(self.header()) + "\n")
            for name, entry in self.entries.items():
                out.write(json.dumps([name, *entry]) + "\n")
        return target

    @classmethod
    def load(cls, path: str | Path) -> FsSnapshot:
        """Read a file written by :meth:`save`, line by line.

        :raise SnapshotFormatError: not a snapshot file, or a bad line (with its number).
        """
        source = Path(path)
        with _open_text(source, "r") as lines:
            header = _read_header(source, lines.readline())
            entries: dict[str, Entry] = {}
            for number, line in enumerate(lines, start=2):
                entries.update([_read_entry_line(source, number, line)])
        if len(entries) != header.get("entry_count", len(entries)):
            raise SnapshotFormatError(
                f"{source}: header announces {header['entry_count']} entries, "
                f"file holds {len(entries)} (truncated?)"
            )
        return cls(
            root=str(header.get("root", "")),
            entries=entries,
            taken_at_host=float(header.get("taken_at_host") or 0.0),
            taken_at_guest=header.get("taken_at_guest"),
            os=header.get("os"),
            collection_time=header.get("collection_time"),
            errors=list(header.get("errors") or []),
        )


def _open_text(path: Path, mode: str) -> IO[str]:
    # surrogateescape: non-UTF-8 guest names survive as their original bytes.
    if path.name.endswith(".gz"):
        return gzip.open(  # type: ignore[return-value]  # text mode: a TextIOWrapper
            path, mode + "t", encoding="utf-8", errors="surrogateescape"
        )
    return open(path, mode, encoding="utf-8", errors="surrogateescape")


def _read_header(source: Path, line: str) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SnapshotFormatError(f"{source}: line 1 is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotFormatError(f"{source}: not an {SNAPSHOT_FORMAT} file")
    if header.get("version") != SNAPSHOT_FORMAT_VERSION:
        raise SnapshotFormatError(
            f"{source}: format version {header.get('version')!r} is not supported "
            f"(this is version {SNAPSHOT_FORMAT_VERSION})"
        )
    return header


def _read_entry_line(source: Path, number: int, line: str) -> tuple[str, Entry]:
    try:
        row = json.loads(line)
        if not isinstance(row, list) or len(row) != 1 + len(Entry._fields):
            raise ValueError(f"expected a list of {1 + len(Entry._fields)} items")
        name, kind, *rest = row
        if kind not in ENTRY_KINDS:
            raise ValueError(f"bad type {kind!r}")
        return name, Entry(sys.intern(kind), *rest)
    except ValueError as exc:
        raise SnapshotFormatError(f"{source}: line {number}: {exc}") from None
