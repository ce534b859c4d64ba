"""Filesystem snapshots of a guest, compact on the host (DESIGN §3 and §5).

A snapshot is built from the ``get_filesystem_snapshot`` tool result::

    before = FsSnapshot.from_result(result, root="/home/user")
    ...
    diff = after.diff(before)            # FsDiff: created, deleted, modified

The facade asks for the record format instead (``format="lines"``, pages of
NUL-terminated records, see docs/agent.md) and reads it page by page with
:class:`SnapshotPages` (or :meth:`FsSnapshot.from_lines`): no giant JSON document
on either side, only one page at a time besides the entries.

Each path maps to one :class:`Entry`, held as columns
(:class:`~pytest_adare.forensics.entry_table.EntryTable`: arrays, no object per field),
so a million entries cost about 240 MB, and snapshots of one tree taken one after the
other share their path strings. :meth:`FsSnapshot.save` and
:meth:`FsSnapshot.load` stream JSON Lines (gzip when the name ends in ``.gz``)
one entry at a time, never one giant JSON document.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import filterfalse
from pathlib import Path
from typing import IO, Any

from pytest_adare.forensics.diff import FieldChanges, FsDiff, Modifications, PathSet, changed_fields
from pytest_adare.forensics.entry import (
    ENTRY_KINDS,
    Entry,
    SnapshotFormatError,
    entries_from_records,
    entry_from_meta,
    finite_seconds,
    number_or_none,
    page_columns,
)
from pytest_adare.forensics.entry_table import EntryTable, as_table

__all__ = ["Entry", "FsSnapshot", "SnapshotFormatError", "SnapshotPages", "diff_snapshots"]

BATCH = 20_000
"""Entries packed into the columns at a time when reading a dict or a file."""
SNAPSHOT_FORMAT = "adare-fs-snapshot"
SNAPSHOT_FORMAT_VERSION = 1


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
    entries: Mapping[str, Entry]
    taken_at_host: float = field(default_factory=time.time)
    taken_at_guest: float | None = None
    os: str | None = None
    collection_time: float | None = None
    errors: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Any mapping given (a dict a test built) is held as columns like the rest.
        self.entries = as_table(self.entries)

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
        entries = EntryTable()
        if consume:
            while raw:
                batch = [raw.popitem() for _ in range(min(len(raw), BATCH))]
                entries.extend((path, entry_from_meta(path, meta)) for path, meta in batch)
        else:
            entries.extend((path, entry_from_meta(path, meta)) for path, meta in raw.items())
        collection_time = result.get("collection_time")
        errors = result.get("errors") or []
        if not isinstance(errors, list):
            raise SnapshotFormatError(f"result 'errors' is not a list: {type(errors).__name__}")
        return cls(
            root=root,
            entries=entries,
            taken_at_host=time.time() if taken_at_host is None else taken_at_host,
            taken_at_guest=taken_at_guest,
            os=os,
            collection_time=number_or_none(collection_time, "collection_time"),
            errors=[dict(error) for error in errors if isinstance(error, Mapping)],
        )

    @classmethod
    def from_lines(
        cls,
        pages: Iterable[Mapping[str, Any]],
        *,
        root: str,
        os: str | None = None,
        taken_at_guest: float | None = None,
        taken_at_host: float | None = None,
    ) -> FsSnapshot:
        """Build a snapshot from the pages of a ``format="lines"`` snapshot, in order.

        :raise SnapshotFormatError: a page failed or is malformed, or the pages end
            before the last one.
        """
        reader = SnapshotPages(root)
        complete = False
        for page in pages:
            complete = reader.add(page) is None
        if not complete:
            raise SnapshotFormatError(f"snapshot of {root!r}: the pages end before the last one")
        return reader.snapshot(os=os, taken_at_guest=taken_at_guest, taken_at_host=taken_at_host)

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
            entries = EntryTable()
            batch: list[tuple[str, Entry]] = []
            for number, line in enumerate(lines, start=2):
                batch.append(_read_entry_line(source, number, line))
                if len(batch) == BATCH:
                    entries.extend(batch)
                    batch = []
            entries.extend(batch)
        if len(entries) != header.get("entry_count", len(entries)):
            raise SnapshotFormatError(
                f"{source}: header announces {header['entry_count']} entries, "
                f"file holds {len(entries)} (truncated?)"
            )
        return cls(
            root=str(header.get("root", "")),
            entries=entries,
            taken_at_host=number_or_none(header.get("taken_at_host"), "taken_at_host") or 0.0,
            taken_at_guest=number_or_none(header.get("taken_at_guest"), "taken_at_guest"),
            os=header.get("os"),
            collection_time=number_or_none(header.get("collection_time"), "collection_time"),
            errors=list(header.get("errors") or []),
        )


class SnapshotPages:
    """Reads the pages of one ``format="lines"`` snapshot into entries as they come.

    >>> pages = SnapshotPages("/")
    >>> pages.add({"status": "success", "format": "lines", "cursor": None,
    ...            "records": "d 0 755 0 0 2 1.0 1.0 1.0 - /\\0\\0", "entries": 1})
    >>> len(pages.snapshot())
    1
    """

    MAX_ERRORS = 10_000

    def __init__(self, root: str, like: FsSnapshot | None = None) -> None:
        """``like``: an earlier snapshot of the same tree, whose path strings this one
        shares (the facade passes its last one of ``root``)."""
        self.root = root
        self.entries = EntryTable()
        earlier = like.entries if like is not None else None
        self._like = earlier if isinstance(earlier, EntryTable) else None
        self.errors: list[dict[str, str]] = []
        self.collection_time: float | None = None

    def add(self, result: Mapping[str, Any]) -> str | None:
        """Read one page; returns the cursor of the next one, None after the last.

        :raise SnapshotFormatError: the page failed or is malformed.
        """
        if result.get("status") != "success":
            raise SnapshotFormatError(
                f"snapshot of {self.root!r} failed: {result.get('message', result.get('status'))!r}"
            )
        records, cursor = result.get("records"), result.get("cursor")
        if result.get("format") != "lines" or not isinstance(records, str):
            raise SnapshotFormatError(f"not a page of records: format={result.get('format')!r}")
        if cursor is not None and not isinstance(cursor, str):
            raise SnapshotFormatError(f"page cursor is not a string: {cursor!r}")
        read = page_columns(records)  # a lister's page: straight into the columns
        if read is not None:
            added = len(read[0])
            new = self.entries.extend_columns(*read, like=self._like)
        else:
            pairs = list(entries_from_records(records))  # names a bad record
            added = len(pairs)
            new = self.entries.extend(pairs, like=self._like)
        if added != result.get("entries", added) or new != added:
            raise SnapshotFormatError(
                f"page announces {result.get('entries')!r} entries, holds {added} "
                f"({added - new} paths seen twice)"
            )
        errors = result.get("errors") or []
        if not isinstance(errors, list):
            raise SnapshotFormatError(f"page 'errors' is not a list: {type(errors).__name__}")
        room = self.MAX_ERRORS - len(self.errors)
        self.errors += [dict(e) for e in errors[: max(0, room)] if isinstance(e, Mapping)]
        self.collection_time = number_or_none(result.get("collection_time"), "collection_time")
        return cursor

    def snapshot(
        self,
        *,
        os: str | None = None,
        taken_at_guest: float | None = None,
        taken_at_host: float | None = None,
    ) -> FsSnapshot:
        """The snapshot of the pages read so far (read them all first)."""
        return FsSnapshot(
            root=self.root,
            entries=self.entries,
            taken_at_host=time.time() if taken_at_host is None else taken_at_host,
            taken_at_guest=taken_at_guest,
            os=os,
            collection_time=self.collection_time,
            errors=self.errors,
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


def _optional_seconds(value: Any, what: str) -> float | None:
    return None if value is None else finite_seconds(value, what)


def _read_entry_line(source: Path, number: int, line: str) -> tuple[str, Entry]:
    try:
        row = json.loads(line)
        if not isinstance(row, list) or len(row) != 1 + len(Entry._fields):
            raise ValueError(f"expected a list of {1 + len(Entry._fields)} items")
        name, kind, *rest = row
        if kind not in ENTRY_KINDS:
            raise ValueError(f"bad type {kind!r}")
        entry = Entry(sys.intern(kind), *rest)
        return name, entry._replace(
            mtime=finite_seconds(entry.mtime, "mtime"),
            atime=_optional_seconds(entry.atime, "atime"),
            ctime=_optional_seconds(entry.ctime, "ctime"),
            crtime=_optional_seconds(entry.crtime, "crtime"),
        )
    except (ValueError, TypeError) as exc:
        raise SnapshotFormatError(f"{source}: line {number}: {exc}") from None


def diff_snapshots(before: FsSnapshot, after: FsSnapshot) -> FsDiff:
    """The :class:`FsDiff` from ``before`` to ``after`` (use ``after.diff(before)``)."""
    old, new = before.entries, after.entries
    # Only the paths that differ are gathered: ``keys() - keys()`` would copy the first
    # view into a set of every path (32 MiB a million) before removing the second's.
    created = set(filterfalse(old.keys().__contains__, new.keys()))
    deleted = set(filterfalse(new.keys().__contains__, old.keys()))
    modified: dict[str, FieldChanges] = {}
    candidates: Iterable[str]
    if isinstance(old, EntryTable) and isinstance(new, EntryTable):
        # Column by column, the common paths streamed (no set of a million paths).
        candidates = old.differing(new, (path for path in new if path not in created))
    else:
        candidates = new.keys() & old.keys()
    for path in candidates:
        was, now = old[path], new[path]
        if was != now:
            changes = changed_fields(was, now)
            if changes:
                modified[path] = changes
    return FsDiff(
        created=PathSet(created),
        deleted=PathSet(deleted),
        modified=Modifications(modified),
        before_entries={p: old[p] for p in deleted | modified.keys()},
        after_entries={p: new[p] for p in created | modified.keys()},
        metadata={
            "root": after.root,
            "os": after.os,
            "before": before.header(),
            "after": after.header(),
        },
    )
