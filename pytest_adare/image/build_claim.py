"""Directories a build works in, claimed while it lives, and reaped once it is dead.

A build works in a temporary directory (``/tmp/adare-build-*``: the root file
system, the hooks, the staged files) and a partial image directory beside the cache
entry (``.<name>.building-*``). A build killed outright (SIGKILL, the OOM killer) leaves
both, and in root mode what mmdebstrap had mounted in the root file system. So each
directory is *claimed*: an exclusive ``flock`` on the directory itself, held by the
build and, for the work directory, by every process it starts (mmdebstrap and its hooks
inherit the descriptor), so the claim ends only when the last of them is gone, whatever
killed them. The next build :func:`reap`\\s every directory of the same kind that is its
own user's and no longer claimed: it detaches what is mounted inside, then removes it.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from pytest_adare.image.sandbox_enter import mounts_under

WORK_PREFIX = "adare-build-"
PARTIAL_MARK = ".building-"
_CLAIMING = ".adare-claiming-"


class Claim:
    """A new directory under ``parent`` (``mkdtemp``'s name and mode), claimed by this
    process until :meth:`release`; ``fd`` is the descriptor that holds the claim
    (hand it to a child that must hold it too: ``pass_fds``)."""

    def __init__(self, parent: Path, prefix: str) -> None:
        # Made and claimed under a name no reaper looks at, then renamed (the claim is on
        # the directory, so it moves with it): never seen unclaimed under its own name.
        made = Path(tempfile.mkdtemp(prefix=_CLAIMING, dir=parent))
        self.fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else has it
        self.path = parent / (prefix + made.name[len(_CLAIMING) :])
        os.rename(made, self.path)

    def release(self) -> None:
        """Let go of the claim (the directory itself is the caller's to remove)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def partial_prefix(target: Path) -> str:
    """The prefix of ``target``'s partial directories: ``.<name>.building-``."""
    return f".{target.name}{PARTIAL_MARK}"


def _unclaimed(path: Path) -> bool:
    """Whether ``path`` is a directory of this user that no live process claims."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    finally:
        os.close(fd)


def mounts_inside(path: Path) -> list[Path]:
    """What is mounted inside ``path`` (in this process's mount namespace), deepest first."""
    return [Path(point) for point in mounts_under(str(path))]


def detach(mounts: list[Path]) -> None:
    """Detach each of ``mounts`` (``MNT_DETACH``: also when a process has something open
    in it; it is gone from the tree at once). Needs root; errors are left to the caller's
    check with :func:`mounts_inside`."""
    libc = ctypes.CDLL(None, use_errno=True)
    for point in mounts:
        libc.umount2(str(point).encode(), 2)  # MNT_DETACH; a child goes with its parent


def reap(
    parent: Path, prefix: str, remove: Callable[[Path], None], *, contains: str = ""
) -> list[Path]:
    """Remove the directories in ``parent`` named ``prefix*`` (holding ``contains`` after
    it, if given) that are this user's and unclaimed; returns them.

    Mounts inside are detached first, and a directory that still has one is kept: its
    removal never crosses into what is mounted there.
    """
    reaped = []
    try:
        names = [p for p in parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    for path in names:
        if contains not in path.name[len(prefix) :] or not _unclaimed(path):
            continue
        if mounts := mounts_inside(path):
            detach(mounts)
            if mounts_inside(path):
                continue
        remove(path)
        reaped.append(path)
    return reaped
