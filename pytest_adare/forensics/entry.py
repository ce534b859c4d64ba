"""One file-system entry as snapshots, diffs and exports hold it (a leaf module).

:class:`Entry` is a compact named tuple; :func:`entry_from_meta` validates the
agent's (or a saved file's) metadata dict into one, :func:`entry_to_meta` is
its inverse, :func:`entries_from_records` reads the agent's record format
(``format="lines"``, see docs/agent.md). Everything the guest sends is checked
here, once.
"""

from __future__ import annotations

import contextlib
import gc
import stat
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from itertools import repeat
from operator import add, floordiv, mul, or_
from typing import Any, NamedTuple

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


def number_or_none(value: Any, what: str) -> float | None:
    """A timestamp as epoch seconds: accepts numbers and ISO 8601 strings."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SnapshotFormatError(f"{what} must be a number or ISO 8601 string, not a bool")
    if isinstance(value, (int, float)):
        return finite_seconds(value, what)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise SnapshotFormatError(f"{what} is not a timestamp: {repr(value)[:60]}")


def finite_seconds(value: Any, what: str) -> float:
    """``value`` as a float, refusing what no float holds (``10**400``) and inf/NaN.

    :raise SnapshotFormatError: naming ``what``.
    """
    try:
        seconds = float(value)
    except OverflowError:
        raise SnapshotFormatError(f"{what} is out of range: {str(value)[:40]}...") from None
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise SnapshotFormatError(f"{what} is not a finite time: {value!r}")
    return seconds


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
    mtime = number_or_none(meta.get("mtime", stamps.get("modified")), f"{path!r}: mtime")
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
        atime=number_or_none(stamps.get("accessed"), f"{path!r}: accessed"),
        ctime=number_or_none(stamps.get("changed"), f"{path!r}: changed"),
        crtime=number_or_none(stamps.get("created"), f"{path!r}: created"),
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


_KIND_BY_LETTER = {"f": "file", "d": "dir", "l": "symlink"}
_TYPE_BITS = {
    "f": stat.S_IFREG,
    "d": stat.S_IFDIR,
    "l": stat.S_IFLNK,
    "b": stat.S_IFBLK,
    "c": stat.S_IFCHR,
    "p": stat.S_IFIFO,
    "s": stat.S_IFSOCK,
}
RECORD_FIELDS = 11
"""Space-separated fields before a record's first NUL (the path is the last)."""


def _record_time(text: str) -> float:
    # sec + nsec * 1e-9, as os.stat_result computes st_mtime: equal floats, not just close.
    seconds, _, fraction = text.partition(".")
    if not fraction.isdigit() and fraction:
        raise ValueError(f"bad time {text!r}")
    try:
        return int(seconds) + int(fraction[:9].ljust(9, "0")) * 1e-9
    except OverflowError:  # int + float: a whole part beyond any float (10**400)
        raise ValueError(f"time {text[:40]!r}... is out of range") from None


def entries_from_records(text: str) -> Iterator[tuple[str, Entry]]:
    """The ``(path, Entry)`` pairs of one page of records (whole records only):
    ``TYPE SIZE PERM UID GID INODE MTIME ATIME CTIME SHA256 PATH\\0TARGET\\0`` each.

    >>> dict(entries_from_records("l 3 777 0 0 9 1.5 2.0 3.0000000010 - /a b\\0/x\\0"))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'/a b': Entry(kind='symlink', size=3, mode=41471, uid=0, gid=0, inode=9, mtime=1.5,
                   atime=2.0, ctime=3.000000001, crtime=None, sha256=None, target='/x')}

    :raise SnapshotFormatError: naming the record (by number) and what is wrong.
    """
    with _collection_paused():
        fast = _records_by_column(text)
    return iter(fast) if fast is not None else _records_by_field(text)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    # A page makes ~10 objects per entry and no cycles: the cyclic collector, run
    # every 700 allocations, would cost more than the reading itself (measured 6x on
    # the tuples alone).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _records_by_column(text: str) -> list[tuple[str, Entry]] | None:
    """The pairs of a page, field by field for the whole page at once; None when a
    record does not read this way (then :func:`_records_by_field` says why).

    Why columns: every record is split by one C call (``str.split``), the fields of
    one kind are then slices of one list, converted by ``map`` in C; only the times
    and the kind-dependent fields take a Python expression each. The results equal
    :func:`_records_by_field`'s (tests/unit/pytest_adare/forensics/test_snapshot_records.py).
    """
    read = _page_columns(text)  # the caller paused the collector
    if read is None:
        return None
    paths, (kinds, sizes, modes, uids, gids, inodes, mtimes, atimes, ctimes, *rest) = read
    columns = zip(
        kinds, sizes, _shared(modes), uids, gids, inodes, mtimes,
        _same_as(mtimes, atimes), _same_as(mtimes, ctimes), *rest, strict=True,
    )  # fmt: skip
    entries = list(map(tuple.__new__, repeat(Entry), columns))
    return list(zip(paths, entries, strict=True))


def page_columns(text: str) -> tuple[list[str], list[list[Any]]] | None:
    """A page's paths and its :class:`Entry` fields as 12 columns (lists, in the
    Entry's field order), each value as :func:`entries_from_records` gives it; None
    when a record does not read this way (the field-by-field reader then says why)."""
    with _collection_paused():
        return _page_columns(text)


def _page_columns(text: str) -> tuple[list[str], list[list[Any]]] | None:
    parts = text.split("\0")
    if parts.pop() != "" or len(parts) % 2:
        return None
    heads, targets = parts[0::2], parts[1::2]
    fields = [field for head in heads for field in head.split(" ", RECORD_FIELDS - 1)]
    if len(fields) != RECORD_FIELDS * len(heads):
        return None
    letters, digests = fields[0::RECORD_FIELDS], fields[9::RECORD_FIELDS]
    perms = fields[2::RECORD_FIELDS]
    if any(len(digest) != 64 for digest in digests if digest != "-"):
        return None
    kinds = list(map(_KIND_BY_LETTER.get, letters, repeat("other")))
    try:
        columns: list[list[Any]] = [
            kinds,
            list(map(int, fields[1::RECORD_FIELDS])),
            list(map(or_, map(_TYPE_BITS.get, letters, repeat(0)), map(int, perms, repeat(8)))),
            list(map(int, fields[3::RECORD_FIELDS])),
            list(map(int, fields[4::RECORD_FIELDS])),
            list(map(int, fields[5::RECORD_FIELDS])),
            _column_times(fields[6::RECORD_FIELDS]),
            _column_times(fields[7::RECORD_FIELDS]),
            _column_times(fields[8::RECORD_FIELDS]),
            [None] * len(heads),
            [None if digest == "-" else digest.lower() for digest in digests],
            [t if k == "symlink" and t else None for k, t in zip(kinds, targets, strict=True)],
        ]
    except (ValueError, OverflowError):
        return None
    return fields[10::RECORD_FIELDS], columns


# Memory: a million entries must fit well under 1 GiB on the host (bench/scale.py). An
# int above 256 or a float is an object of its own (28/24 bytes); the few modes of a
# tree and a time equal to the entry's mtime are held once instead.
def _shared(values: list[int]) -> list[int]:
    """``values`` with equal ones as one object."""
    seen: dict[int, int] = {}
    return list(map(seen.setdefault, values, values))


def _same_as(first: list[float], other: list[float]) -> list[float]:
    """``other`` with the values equal to ``first``'s (same row) as ``first``'s object."""
    return [a if a == b else b for a, b in zip(first, other, strict=True)]


def _column_times(texts: list[str]) -> list[float]:
    """The times of one column, as :func:`_record_time` reads each.

    :raise ValueError: a time has no one dot, or the fractions are not digits of one
        length (the field-by-field reader then takes the page).
    """
    pieces = ".".join(texts).split(".")
    fractions = pieces[1::2]
    if len(pieces) != 2 * len(texts) or not "".join(fractions).isdigit():
        raise ValueError("times not in the listers' form")
    widths = set(map(len, fractions))
    if len(widths) > 1:
        # Mixed widths: a find page (10 digits) starts with the root's record, which
        # the agent writes itself (9). Cut or pad each to nine, as _record_time does.
        fractions = [fraction[:9].ljust(9, "0") for fraction in fractions]
        widths = {9}
    width = widths.pop() if widths else 9
    # int(fraction[:9].ljust(9, "0")), as integer arithmetic on the whole fraction; every
    # step a map of a C function, no Python per value (a page has ~30 k of them)
    nanoseconds = map(int, fractions)
    if width < 9:
        nanoseconds = map(mul, nanoseconds, repeat(10 ** (9 - width)))
    elif width > 9:
        nanoseconds = map(floordiv, nanoseconds, repeat(10 ** (width - 9)))
    return list(map(add, map(int, pieces[0::2]), map(mul, nanoseconds, repeat(1e-9))))


def _records_by_field(text: str) -> Iterator[tuple[str, Entry]]:
    """The reader of any page: field by field, with an error naming a bad record."""
    parts = text.split("\0")
    if parts.pop() != "" or len(parts) % 2:
        raise SnapshotFormatError("records must be whole: two NUL-terminated parts each")
    for number in range(0, len(parts), 2):
        head, target = parts[number], parts[number + 1]
        fields = head.split(" ", RECORD_FIELDS - 1)
        try:
            if len(fields) != RECORD_FIELDS:
                raise ValueError(f"{len(fields)} fields instead of {RECORD_FIELDS}")
            letter, size, perm, uid, gid, inode, mtime, atime, ctime, digest, path = fields
            if digest != "-" and len(digest) != 64:
                raise ValueError(f"bad sha256 {digest[:70]!r}")
            kind = _KIND_BY_LETTER.get(letter, "other")
            entry = Entry(
                kind=kind,
                size=int(size),
                mode=_TYPE_BITS.get(letter, 0) | int(perm, 8),
                uid=int(uid),
                gid=int(gid),
                inode=int(inode),
                mtime=_record_time(mtime),
                atime=_record_time(atime),
                ctime=_record_time(ctime),
                crtime=None,
                sha256=None if digest == "-" else digest.lower(),
                target=target if kind == "symlink" and target else None,
            )
        except ValueError as exc:
            raise SnapshotFormatError(f"record {number // 2 + 1} ({head[:120]!r}): {exc}") from None
        yield path, entry
