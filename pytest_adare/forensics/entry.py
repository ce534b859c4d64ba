"""One file-system entry as snapshots, diffs and exports hold it (a leaf module).

:class:`Entry` is a compact named tuple; :func:`entry_from_meta` validates the
agent's (or a saved file's) metadata dict into one, :func:`entry_to_meta` is
its inverse. Everything the guest sends is checked here, once.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import datetime
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
