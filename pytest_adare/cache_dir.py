"""The host's cache root and the lock that lets processes share it (a leaf module).

Built images, agent bundles and the accel verdict live under
``$XDG_CACHE_HOME/pytest-adare``; concurrent pytest sessions and xdist
workers serialise their writes with :func:`exclusive_lock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_adare.errors import ImageError

IMAGE_CACHE_ENV = "ADARE_IMAGE_CACHE"
"""Names a directory of images several users share (``image.cache``); the plugin's
``adare_image_cache`` sets it for the session."""

# Never through a symlink, never blocking on a FIFO someone planted, never a terminal.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_POLL_INTERVAL = 0.2


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/pytest-adare`` (``~/.cache/pytest-adare`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-adare"


@contextmanager
def exclusive_lock(path: Path, timeout: float, what: str, mode: int = 0o644) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``path``, waiting at most ``timeout`` seconds.

    The lock file exists only while it is held: the holder removes it before it lets go,
    so nothing is left beside the cache, whether the work under the lock succeeded or
    failed (a waiter that got the removed file tries again on the new one). A file this
    call creates gets ``mode`` (``0o664`` in a cache several users share), whatever the
    umask; a file already there is only locked: never followed if it is a symlink, never
    written, never chmodded (anyone who may write the directory can plant one).

    :raise ImageError: another process held it for longer than ``timeout``, or ``path``
        is a symlink or not a regular file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    while True:
        fd = _open_lock(path, mode)
        try:
            _wait_for(fd, path, deadline, timeout, what)
            if _still_names(path, fd):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it while we waited: lock the new one
    try:
        yield
    finally:
        # Removed while still held, so a newcomer either waits on this file (and then
        # sees it is gone) or makes a new one; never two holders at once.
        if _still_names(path, fd):
            with contextlib.suppress(OSError):  # another user's file in a sticky directory
                path.unlink()
        os.close(fd)


def _open_lock(path: Path, mode: int) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, mode)
        except FileExistsError:
            pass
        else:
            os.fchmod(fd, mode)  # ours: just made, through no link
            return fd
        try:
            fd = _open_existing(path)
        except FileNotFoundError:
            continue  # its holder removed it between the two opens
        except OSError as exc:
            raise ImageError(f"cannot open the lock {path}: {_why(exc)}") from exc
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            os.close(fd)
            raise ImageError(
                f"the lock {path} is not a regular file ({_kind_name(kind)}); remove it"
            )
        return fd


def _open_existing(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | _OPEN_FLAGS)
    except PermissionError:
        # Another user's lock we may not write: flock needs only an open file.
        return os.open(path, os.O_RDONLY | _OPEN_FLAGS)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link (a lock is never followed); remove it"
    if exc.errno == errno.EISDIR:
        return "it is a directory; remove it"
    return exc.strerror or str(exc)


def _kind_name(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a block device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "of another kind")


def _wait_for(fd: int, path: Path, deadline: float, timeout: float, what: str) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise ImageError(
                    f"waited {timeout:.0f} s for the lock {path} ({what}); "
                    "another process still holds it"
                ) from None
            time.sleep(_POLL_INTERVAL)


def _still_names(path: Path, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd``."""
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
