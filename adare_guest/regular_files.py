"""Opening guest files as regular files only, judged on the descriptor.

A hostile guest process may swap a path for a FIFO, a device or a symlink between a
``stat`` and an ``open``: every file the agent reads or hashes is opened first
(non-blocking, so a FIFO cannot hang the open) and its type read with ``fstat``.
Standard library only; the file transfer and the snapshot walk share it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from typing import Any

HASH_BLOCK = 1024 * 1024
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
"""Open guest files without blocking: a FIFO (or a file swapped for one between a
``stat`` and the ``open``) opens at once and is then refused by its ``fstat``."""
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRegularFile(OSError):
    """An opened guest path is a FIFO, socket, device or directory, not a regular file."""

    def __init__(self, path: str, mode: int) -> None:
        super().__init__(errno.EINVAL, f"{kind_name(mode)}, not a regular file", path)
        self.mode = mode


def kind_name(mode: int) -> str:
    """``a directory``, ``a FIFO``, ... for an ``st_mode`` that is not a regular file."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str, flags: int = READ_FLAGS) -> tuple[int, os.stat_result]:
    """Open ``path`` with ``flags`` and return (fd, fstat) of a regular file.

    The type is judged on the open descriptor, so swapping the path between a check
    and the open cannot make the agent read a FIFO or device.

    :raise NotRegularFile: the path is something else (the fd is closed).
    :raise OSError: it cannot be opened (with ``O_NOFOLLOW``: ELOOP for a symlink).
    """
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(path, st.st_mode)
    return fd, st


def stat_metadata(st: os.stat_result) -> dict[str, Any]:
    """The metadata of one ``lstat`` result (snapshot ``meta`` without type/target/hash)."""
    timestamps: dict[str, float] = {
        "modified": st.st_mtime,
        "accessed": st.st_atime,
        "changed": st.st_ctime,
    }
    birth = getattr(st, "st_birthtime", None)
    if birth is not None:
        timestamps["created"] = birth
    return {
        "size": st.st_size,
        "mtime": st.st_mtime,
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "inode": st.st_ino,
        "timestamps": timestamps,
    }


def file_type(mode: int) -> str:
    """``file``, ``dir``, ``symlink`` or ``other`` for an ``st_mode``."""
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def sha256_file(path: str, stop: Callable[[], bool] | None = None) -> str:
    """Hex sha256 of a regular file's content, read in 1 MiB blocks; a symlink or
    anything but a regular file at ``path`` is refused (it is not followed or opened
    for reading, so a FIFO swapped in cannot block the walk).

    :raise TimeoutError: ``stop()`` became true between two blocks.
    :raise NotRegularFile: ``path`` is not a regular file.
    :raise OSError: it cannot be read (ELOOP for a symlink).
    """
    digest = hashlib.sha256()
    fd, _st = open_regular(path, READ_FLAGS | NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(HASH_BLOCK):
            if stop is not None and stop():
                raise TimeoutError(f"stopped while hashing {path}")
            digest.update(block)
    return digest.hexdigest()
