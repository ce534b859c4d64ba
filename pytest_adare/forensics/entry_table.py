"""A snapshot's entries as columns: path → :class:`~pytest_adare.forensics.entry.Entry`
without one tuple and a dozen number objects per path.

A million-entry snapshot held as a ``dict`` of named tuples costs about 420 bytes an
entry (the tuple, its own int and float objects, the path); a diff holds two. Here each
field is one ``array`` (or a ``bytearray`` of kind codes; a time no row has yet, as
``crtime`` nearly never has, is no array at all), the rare fields (``sha256``,
``target``) are dicts by row, and a row's :class:`Entry` is made when it is read. A
value a column cannot hold (a hostile guest's uid of 2**70) keeps its whole entry aside,
exactly as it came.

Snapshots of one tree share their path strings: :meth:`EntryTable.extend` ``like=`` an
earlier table takes the earlier one's string for every path both hold (a path is then
held once for ``before`` and ``after``).

>>> table = EntryTable()
>>> table.extend([("/a", Entry("file", 3, 0o100644, 0, 0, 9, 1.5, None, 2.0, None, None, None))])
1
>>> table["/a"].size, table["/a"].atime, len(table)
(3, None, 1)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, KeysView, Mapping, Sequence
from itertools import compress, islice, repeat
from operator import itemgetter, ne, or_
from typing import Any

from pytest_adare.forensics.entry import ENTRY_KINDS, Entry

_KIND_CODE = {kind: code for code, kind in enumerate(ENTRY_KINDS)}
_NONE = -math.inf
"""A time column's None: a guest's time is finite (:func:`~.entry.finite_seconds`), and
unlike NaN it equals itself, so two columns compare in C."""

DIFF_CHUNK = 65_536
"""Paths whose columns :meth:`EntryTable.differing` gathers at a time."""
_INT_COLUMNS = (("size", "q"), ("mode", "Q"), ("uid", "Q"), ("gid", "Q"), ("inode", "Q"))
_TIME_COLUMNS = ("mtime", "atime", "ctime", "crtime")


class EntryTable(Mapping[str, Entry]):
    """path → Entry, field by field in arrays; filled by :meth:`extend` (see the module)."""

    __slots__ = ("_ints", "_kinds", "_odd", "_paths", "_rows", "_sha256", "_target", "_times")

    def __init__(self, pairs: Iterable[tuple[str, Entry]] = ()) -> None:
        self._rows: dict[str, int] = {}
        self._paths: list[str] | None = None
        """The paths by row, made when a later table is made ``like`` this one (the dict
        holds them in row order: a row is never removed)."""
        self._kinds = bytearray()
        self._ints = tuple(array(code) for _name, code in _INT_COLUMNS)
        self._times: list[array[float] | None] = [None] * len(_TIME_COLUMNS)
        """None while every row's value is None (``crtime`` nearly always: 8 bytes an
        entry saved), else the column."""
        self._sha256: dict[int, str] = {}
        self._target: dict[int, str] = {}
        self._odd: dict[int, Entry] = {}
        self.extend(pairs)

    # -- reading -----------------------------------------------------------------------

    def __getitem__(self, path: str) -> Entry:
        return self._entry(self._rows[path])

    def __contains__(self, path: object) -> bool:
        return path in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def keys(self) -> KeysView[str]:
        # The dict's own view: set operations on two of them run in C (the diff's).
        return self._rows.keys()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(
            path in other and other[path] == self[path] for path in self._rows
        )

    __hash__ = None  # type: ignore[assignment]  # a mapping: unhashable, as dict is

    def __repr__(self) -> str:
        return f"<EntryTable: {len(self)} entries>"

    def shared_path(self, path: str) -> str:
        """This table's string for ``path`` when it holds it, else ``path`` itself."""
        row = self._rows.get(path)
        return path if row is None else self._path_list()[row]

    def _path_list(self) -> list[str]:
        if self._paths is None:
            self._paths = list(self._rows)
        return self._paths

    def _entry(self, row: int) -> Entry:
        odd = self._odd.get(row)
        if odd is not None:
            return odd
        size, mode, uid, gid, inode = (column[row] for column in self._ints)
        mtime, atime, ctime, crtime = (
            None if column is None or column[row] == _NONE else column[row]
            for column in self._times
        )
        return Entry(
            ENTRY_KINDS[self._kinds[row]], size, mode, uid, gid, inode, mtime,  # type: ignore[arg-type]
            atime, ctime, crtime, self._sha256.get(row), self._target.get(row),
        )  # fmt: skip

    # -- filling -----------------------------------------------------------------------

    def extend(self, pairs: Iterable[tuple[str, Entry]], like: EntryTable | None = None) -> int:
        """Add ``(path, entry)`` pairs (a path already held takes the new entry, as a dict
        update does); ``like``: share its path strings. Returns how many paths were new."""
        pairs = list(pairs)
        if not pairs:
            return 0
        paths = list(map(itemgetter(0), pairs))
        if self._all_new(paths):
            given = map(itemgetter(1), pairs)
            return self._add_new(paths, list(zip(*given, strict=True)), like)
        before = len(self._rows)
        fresh: list[tuple[str, Entry]] = []
        for path, entry in pairs:
            row = self._rows.get(path)
            if row is not None:
                if row >= before:  # twice in these pairs: the later one, as a dict keeps
                    fresh[row - before] = (fresh[row - before][0], entry)
                else:
                    self._replace(row, entry)
                continue
            if like is not None:
                path = like.shared_path(path)
            self._rows[path] = before + len(fresh)
            fresh.append((path, entry))
        if fresh:
            entries = [entry for _, entry in fresh]
            self._append_columns([path for path, _ in fresh], list(zip(*entries, strict=True)))
        return len(fresh)

    def extend_columns(
        self, paths: list[str], columns: Sequence[Sequence[Any]], like: EntryTable | None = None
    ) -> int:
        """:meth:`extend` from a page already in columns (``paths`` and the 12 fields in
        the Entry's order, as :func:`~.entry.page_columns` reads them): no Entry made."""
        if not paths:
            return 0
        if not self._all_new(paths):
            rows = map(tuple.__new__, repeat(Entry), zip(*columns, strict=True))
            return self.extend(zip(paths, rows, strict=True), like)
        return self._add_new(paths, columns, like)

    def _all_new(self, paths: list[str]) -> bool:
        """No path twice and none held yet: every page of a listing."""
        return len(set(paths)) == len(paths) and self._rows.keys().isdisjoint(paths)

    def _add_new(
        self, paths: list[str], columns: Sequence[Sequence[Any]], like: EntryTable | None
    ) -> int:
        """Rows for ``paths`` (all new, see :meth:`_all_new`), all in C but the sharing."""
        before = len(self._rows)
        rows: Iterable[int] = range(before, before + len(paths))
        if like is not None:
            shared = repeat(like._path_list())
            paths = list(map(_shared, map(like._rows.get, paths), paths, shared))
            rows = like._row_numbers(before, len(paths))
        self._rows.update(zip(paths, rows, strict=True))
        self._append_columns(paths, columns)
        return len(paths)

    def _row_numbers(self, first: int, count: int) -> list[int]:
        """The numbers ``first`` .. ``first + count - 1`` as this table's own int objects
        where it has those rows: a table made ``like`` this one then holds no second int
        object per row (28 bytes each), whatever order its paths came in."""
        mine = list(map(self._rows.__getitem__, self._path_list()[first : first + count]))
        return mine + list(range(first + len(mine), first + count))

    def _append_columns(self, paths: list[str], columns: Sequence[Sequence[Any]]) -> None:
        first = len(self._kinds)
        kinds, times = columns[0], columns[6:10]
        try:
            packed_ints = [
                array(code, values)
                for (_name, code), values in zip(_INT_COLUMNS, columns[1:6], strict=True)
            ]
            packed_times = [_time_column(values) for values in times]
            codes = bytes(map(_KIND_CODE.__getitem__, kinds))
        except (OverflowError, TypeError, ValueError, KeyError):
            if self._paths is not None:
                self._paths += paths
            entries = map(tuple.__new__, repeat(Entry), zip(*columns, strict=True))
            for offset, entry in enumerate(entries):  # row by row: the odd ones kept whole
                self._append_one(first + offset, entry)
            return
        if self._paths is not None:
            self._paths += paths
        self._kinds += codes
        for column, packed in zip(self._ints, packed_ints, strict=True):
            column.extend(packed)
        for index, packed_time in enumerate(packed_times):
            times_column = self._times[index]
            if packed_time is None:  # all None: a held column grows by that many Nones
                if times_column is not None:
                    times_column.extend(_nones(len(paths)))
                continue
            if times_column is None:
                times_column = self._times[index] = _nones(first)
            times_column.extend(packed_time)
        for rare, values in ((self._sha256, columns[10]), (self._target, columns[11])):
            if values.count(None) != len(values):  # most pages: no hash, no link
                rare.update((first + i, v) for i, v in enumerate(values) if v is not None)

    def _append_one(self, row: int, entry: Entry) -> None:
        self._kinds.append(0)
        for column in self._ints:
            column.append(0)
        for times_column in self._times:
            if times_column is not None:
                times_column.append(_NONE)
        self._replace(row, entry)

    def _replace(self, row: int, entry: Entry) -> None:
        self._odd.pop(row, None)
        self._sha256.pop(row, None)
        self._target.pop(row, None)
        try:
            code = _KIND_CODE[entry.kind]
            ints = [array(c, [v]) for (_n, c), v in zip(_INT_COLUMNS, entry[1:6], strict=True)]
            times = [_NONE if v is None else float(v) for v in entry[6:10]]
        except (OverflowError, TypeError, ValueError, KeyError):
            self._odd[row] = entry
            return
        if any(t == _NONE or t != t for t, v in zip(times, entry[6:10], strict=True)
               if v is not None):  # fmt: skip
            self._odd[row] = entry  # a time that would not read back as it was
            return
        self._kinds[row] = code
        for column, packed in zip(self._ints, ints, strict=True):
            column[row] = packed[0]
        for index, value in enumerate(times):
            times_column = self._times[index]
            if times_column is None:
                if value == _NONE:
                    continue
                times_column = self._times[index] = _nones(len(self._kinds))
            times_column[row] = value
        if entry.sha256 is not None:
            self._sha256[row] = entry.sha256
        if entry.target is not None:
            self._target[row] = entry.target

    def differing(self, later: EntryTable, paths: Iterable[str]) -> list[str]:
        """Of ``paths`` (held by both), those whose kind, size, mode, owner, times
        (``mtime``, ``ctime``), ``sha256`` or ``target`` may differ in ``later``: a
        superset of a diff's modified paths, found column by column in C (a row is never
        made into an Entry here). Rows kept whole are always in it."""
        found: list[str] = []
        stream = iter(paths)
        while chunk := list(islice(stream, DIFF_CHUNK)):  # bounded: a chunk's values at once
            found += self._differing_chunk(later, chunk)
        return found

    def _differing_chunk(self, later: EntryTable, paths: list[str]) -> list[str]:
        mine = array("q", map(self._rows.__getitem__, paths))
        theirs = array("q", map(later._rows.__getitem__, paths))
        columns: list[tuple[Sequence[Any], Sequence[Any]]] = [
            (self._kinds, later._kinds),
            *zip(self._ints[:4], later._ints[:4], strict=True),  # size, mode, uid, gid
            (_held(self._times[0]), _held(later._times[0])),  # mtime
            (_held(self._times[2]), _held(later._times[2])),  # ctime
        ]
        # A column's values at the rows gathered in C (itemgetter), compared as two
        # tuples: equal (most columns), it has nothing to say; else its rows that differ.
        gather_mine, gather_theirs = _gatherer(mine), _gatherer(theirs)
        flags: Iterator[Any] | None = None
        for old, new in columns:
            before, after = gather_mine(old), gather_theirs(new)
            if before == after:
                continue
            differs = map(ne, before, after)
            flags = differs if flags is None else map(or_, flags, differs)
        found = set(compress(paths, flags)) if flags is not None else set()
        # The rare fields and the rows kept whole, row by row where either table has any.
        rare = (self._sha256, self._target, self._odd, later._sha256, later._target, later._odd)
        if any(rare):
            for path, row, their_row in zip(paths, mine, theirs, strict=True):
                if (
                    row in self._odd or their_row in later._odd
                    or self._sha256.get(row) != later._sha256.get(their_row)
                    or self._target.get(row) != later._target.get(their_row)
                ):  # fmt: skip
                    found.add(path)
        return list(found)


def _shared(row: int | None, path: str, paths: list[str]) -> str:
    return path if row is None else paths[row]


def _nones(rows: int) -> array[float]:
    """A time column of ``rows`` Nones."""
    return array("d", [_NONE]) * rows


def _held(column: array[float] | None) -> Any:
    """A time column to gather from (``column[row]``): one of all None is :data:`_NONE` at
    every row."""
    return column if column is not None else _AllNone()


class _AllNone:
    """Reads :data:`_NONE` at every row (an ``itemgetter`` gathers from it)."""

    def __getitem__(self, row: int) -> float:
        return _NONE


def _time_column(values: Sequence[Any]) -> array[float] | None:
    """One time field of a batch as its column; None is :data:`_NONE`, and a batch of
    only None is None (nothing to hold).

    :raise ValueError: a time that would not read back (NaN, or the sentinel itself).
    """
    nones = values.count(None)
    if nones == len(values):  # crtime, nearly always
        return None
    column = array("d", values if not nones else [_NONE if v is None else v for v in values])
    present = column if not nones else [v for v in values if v is not None]
    if any(map(math.isnan, present)) or min(present) == _NONE:
        raise ValueError("a time that would not read back")  # the batch is kept row by row
    return column


def _gatherer(rows: array[int]) -> Any:
    """``column -> tuple`` of the column's values at ``rows`` (a tuple for one row too)."""
    if len(rows) == 1:
        row = rows[0]
        return lambda column: (column[row],)
    return itemgetter(*rows)


def as_table(entries: Mapping[str, Entry] | Iterable[tuple[str, Entry]] | Any) -> EntryTable:
    """``entries`` as an :class:`EntryTable` (itself when it is one)."""
    if isinstance(entries, EntryTable):
        return entries
    if isinstance(entries, Mapping):
        return EntryTable(entries.items())
    return EntryTable(entries)
