"""The host's cache root and the lock that lets processes share it (a leaf module).

Built images, agent bundles and the accel verdict live under
``$XDG_CACHE_HOME/pytest-adare``; concurrent pytest sessions and xdist
workers serialise their writes with :func:`exclusive_lock`.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_adare.errors import ImageError

IMAGE_CACHE_ENV = "ADARE_IMAGE_CACHE"
"""Names a directory of images several users share (``image.cache``); the plugin's
``adare_image_cache`` sets it for the session."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/pytest-adare`` (``~/.cache/pytest-adare`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-adare"


@contextmanager
def exclusive_lock(path: Path, timeout: float, what: str, mode: int = 0o644) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``path``, waiting at most ``timeout`` seconds.

    ``mode`` is the lock file's (``0o664`` in a cache several users share, so each may
    open it; applied whatever the umask when this user owns the file).

    :raise ImageError: another process held it for longer than ``timeout``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, mode)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ImageError(
                        f"waited {timeout:.0f} s for the lock {path} ({what}); "
                        "another process still holds it"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
