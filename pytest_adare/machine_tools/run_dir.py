"""A process's private temporary folders (a machine's sockets and boot files, a LAN's
sockets), and the removal of those a killed process left behind.

A process removes its folders when it ends, even without a clean shutdown (a finalizer,
at exit), but a SIGKILLed pytest (a cancelled CI job, the OOM killer) runs no code: its
``/tmp/adare-vm0-*`` stays, with the VM's agent configuration and console log in it.
So each folder made here holds a mark naming its maker (pid and start time, so a reused
pid is not taken for the maker; its pid namespace and the boot), and making a folder
first removes every marked folder whose maker is gone. Only this user's folders are
touched, never through a symlink, and never a folder without a valid mark: another user
cannot make this one remove anything. A maker in another pid namespace (a container
sharing this ``/tmp``) cannot be looked up from here, so its folders stay; a maker of an
earlier boot is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

MARK = ".adare-maker"
"""The file in a run folder naming its maker: ``PID START PIDNS BOOT`` (START: the
process's start time, in clock ticks since boot, field 22 of ``/proc/PID/stat``; PIDNS:
the inode of its ``/proc/PID/ns/pid``; BOOT: the kernel's boot id; 0 for what is
unknown)."""

PREFIX = "adare-"
"""Every run folder's name starts with this (the names of what a VM leaves behind)."""

_MARK_LIMIT = 128  # three numbers and a boot id; a longer mark is not ours
_ZOMBIE = -1


def make_run_dir(prefix: str, root: Path | None = None) -> Path:
    """A new 0700 folder ``PREFIX…`` in ``root`` (default: the temporary directory),
    marked as this process's; the marked folders of dead makers are removed first.

    :raise ValueError: ``prefix`` does not start with :data:`PREFIX`.
    """
    if not prefix.startswith(PREFIX):
        raise ValueError(f"a run folder's prefix starts with {PREFIX!r}, not {prefix!r}")
    where = Path(tempfile.gettempdir()) if root is None else root
    reap_dead_run_dirs(where)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    _mark(path, MARK)
    return path


def claim_run_dir(path: Path) -> None:
    """Mark ``path``, a run folder another process made and handed over, as this
    process's (a keeper's, from the pytest that kept a VM), so that it outlives its maker
    and goes with this process. The mark is replaced at once: never missing, never torn."""
    staged = f"{MARK}.{os.getpid()}"
    _mark(path, staged)
    os.replace(path / staged, path / MARK)


def disown_run_dir(path: Path) -> None:
    """Drop ``path``'s mark: a folder kept for the user (a kept VM's disk, a workdir
    ``launch(keep_workdir=True)`` leaves) is the user's to remove, never reaped."""
    with contextlib.suppress(FileNotFoundError):
        (path / MARK).unlink()


def _mark(path: Path, name: str) -> None:
    pid = os.getpid()
    start = _start_time(pid)
    fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"{pid} {start if start is not None and start >= 0 else 0} "
                  f"{_pid_namespace(pid)} {_boot_id()}\n")  # fmt: skip


def _pid_namespace(pid: int) -> int:
    """The inode of process ``pid``'s pid namespace, 0 if unknown."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return 0


def _boot_id() -> str:
    """The kernel's boot id (a UUID), "0" if unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or "0"
    except OSError:
        return "0"


def reap_dead_run_dirs(root: Path | None = None) -> list[Path]:
    """Remove the run folders in ``root`` (default: the temporary directory) that this
    user owns and whose maker no longer runs; the folders removed."""
    where = Path(tempfile.gettempdir()) if root is None else root
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    uid = os.getuid()
    here = (_boot_id(), _pid_namespace(os.getpid()))
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        maker = _read_mark(Path(entry.path) / MARK)
        if maker is None or not _gone(maker, *here):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _read_mark(path: Path) -> tuple[int, int, int, str] | None:
    """The mark's pid, start time, pid namespace and boot; None if it is missing, not a
    regular file of this user, or not what :data:`MARK` says."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        text = handle.read(_MARK_LIMIT + 1)
    fields = text.decode("ascii", "replace").split()
    if len(text) > _MARK_LIMIT or len(fields) != 4 or not all(f.isdigit() for f in fields[:3]):
        return None
    pid, start, namespace = (int(f) for f in fields[:3])
    boot = fields[3]
    if pid <= 0 or not (boot == "0" or (len(boot) == 36 and set(boot) <= set("0123456789abcdef-"))):
        return None
    return pid, start, namespace, boot


def _gone(maker: tuple[int, int, int, str], here_boot: str, here_namespace: int) -> bool:
    """Whether the maker a mark names no longer runs, seen from this boot and pid
    namespace. Nothing is removed on a doubt."""
    pid, start, namespace, boot = maker
    if "0" not in (boot, here_boot) and boot != here_boot:
        return True  # made before the last boot
    if 0 not in (namespace, here_namespace) and namespace != here_namespace:
        return False  # another pid namespace: its pids mean nothing here
    return not _runs(pid, start)


def _runs(pid: int, start: int) -> bool:
    """Whether the process that wrote a mark runs: ``pid`` runs and started at ``start``
    (0: unknown, so any process ``pid`` counts). A process not visible here counts as
    running: nothing is removed on a doubt."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process has the pid: a doubt
    now = _start_time(pid)
    if now is None:
        return True
    if now == _ZOMBIE:
        return False
    return start in (0, now)


def _start_time(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot, or None if unknown."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":
            return _ZOMBIE  # it runs no more
        return int(fields[19])
    return None
