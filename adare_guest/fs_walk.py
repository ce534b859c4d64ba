"""The snapshot walk: every entry under a root, with its metadata (and sha256).

``get_filesystem_snapshot`` in the JSON format fills :attr:`Walk.snapshot` with
:func:`walk_tree`; the record format takes :func:`walk_records` page by page
(:class:`adare_guest.fs_listing.WalkListing`) where ``find`` cannot list. The walk is
depth first, follows no symlink, stays on one filesystem when asked, skips
``/proc``, ``/sys``, ``/dev`` and ``/run`` below the root, and stops at its deadline
or when cancelled, with :attr:`Walk.timed_out` set.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from adare_guest import fs_listing
from adare_guest.regular_files import sha256_file

SKIPPED_ROOTS = ("/proc", "/sys", "/dev", "/run")
MAX_REPORTED_ERRORS = 1000
STOP_CHECK_EVERY = 256
"""Entries walked between two checks of the deadline and cancellation."""
IS_WINDOWS = sys.platform == "win32"


@dataclass
class Walk:
    """One walk's parameters and what it found (entries, errors, whether it stopped)."""

    root: str
    exclude: list[str]
    with_hash: bool
    one_filesystem: bool
    cancelled: threading.Event
    deadline: float
    snapshot: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)
    timed_out: bool = False

    def excluded(self, path: str, name: str) -> bool:
        for pattern in self.exclude:
            if path == pattern or path.startswith(pattern.rstrip("/\\") + os.sep):
                return True
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern):
                return True
        return False

    def error(self, path: str, exc: OSError) -> None:
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"path": path, "error": exc.strerror or str(exc)})

    def stopped(self) -> bool:
        if self.cancelled.is_set() or time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return False


def _scan(walk: Walk, directory: str) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(path, lstat, is_dir) of the entries of ``directory``."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    walk.error(entry.path, exc)
                    continue
                yield entry.path, st, stat.S_ISDIR(st.st_mode)
    except OSError as exc:
        walk.error(directory, exc)


_TYPE_BY_FORMAT = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}


def _entry_meta(walk: Walk, path: str, st: os.stat_result) -> dict[str, Any]:
    # One dict literal per entry: this is the hot loop of a snapshot.
    kind = _TYPE_BY_FORMAT.get(stat.S_IFMT(st.st_mode), "other")
    mtime = st.st_mtime
    timestamps = {"modified": mtime, "accessed": st.st_atime, "changed": st.st_ctime}
    birth = getattr(st, "st_birthtime", None)
    if birth is not None:
        timestamps["created"] = birth
    meta: dict[str, Any] = {
        "type": kind,
        "size": st.st_size,
        "mtime": mtime,
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "inode": st.st_ino,
        "timestamps": timestamps,
    }
    if kind == "symlink":
        try:
            meta["target"] = os.readlink(path)
        except OSError as exc:
            walk.error(path, exc)
    elif kind == "file" and walk.with_hash:
        try:
            meta["sha256"] = sha256_file(path, walk.stopped)
        except OSError as exc:
            walk.error(path, exc)
        except TimeoutError:
            walk.timed_out = True
    return meta


def walk_tree(walk: Walk) -> None:
    """Fill ``walk.snapshot`` from ``walk.root`` (depth first, no symlink following)."""
    snapshot = walk.snapshot
    for path, st in walk_entries(walk):
        snapshot[path] = _entry_meta(walk, path, st)


def walk_records(walk: Walk) -> Iterator[bytes]:
    """The :mod:`~adare_guest.fs_listing` records of :func:`walk_entries`."""
    for path, st in walk_entries(walk):
        kind = _TYPE_BY_FORMAT.get(stat.S_IFMT(st.st_mode), "other")
        target, sha256 = b"", None
        try:
            if kind == "symlink":
                target = os.readlink(os.fsencode(path))
            elif kind == "file" and walk.with_hash:
                sha256 = sha256_file(path, walk.stopped)
        except OSError as exc:
            walk.error(path, exc)
        except TimeoutError:
            walk.timed_out = True
        yield fs_listing.entry_record(path, st, sha256, target)


def walk_entries(walk: Walk) -> Iterator[tuple[str, os.stat_result]]:
    """``(path, lstat)`` of ``walk.root`` and of every entry under it that is neither
    skipped nor excluded (depth first, no symlink following), until ``walk.stopped()``.

    :raise OSError: ``walk.root`` cannot be read (at the first ``next``).
    """
    root_st = os.lstat(walk.root)
    yield walk.root, root_st
    if not stat.S_ISDIR(root_st.st_mode):
        return
    root_dev = root_st.st_dev
    filtering = bool(walk.exclude)
    skip_roots = skipped_roots(walk.root)
    stack = [walk.root]
    seen = 0
    while stack:
        directory = stack.pop()
        for path, st, is_dir in _scan(walk, directory):
            seen += 1
            if seen % STOP_CHECK_EVERY == 0 and walk.stopped():
                return
            if path in skip_roots or (filtering and walk.excluded(path, os.path.basename(path))):
                continue
            yield path, st
            if is_dir and not (walk.one_filesystem and st.st_dev != root_dev):
                stack.append(path)
        if walk.timed_out:
            return


def snapshot_root(root_path: str | None) -> str:
    """The normalised walk root (``/``, or ``C:\\`` on Windows, by default)."""
    if not root_path:
        return "C:\\" if IS_WINDOWS else "/"
    root = os.path.normpath(root_path)
    if IS_WINDOWS and len(root) == 2 and root[1] == ":":
        root += "\\"
    return root


def skipped_roots(root: str) -> tuple[str, ...]:
    return () if IS_WINDOWS else tuple(p for p in SKIPPED_ROOTS if p != root)
