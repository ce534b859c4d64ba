"""Run ``argv`` as root inside an image's root file system, cut off from the host (a
script, run with ``python -I``).

Usage: ``python -I sandbox_enter.py ROOT [--read FILE]... -- ARGV...``

A recipe's files and provision steps run through this, as an mmdebstrap hook, on a
built-in base. ``chroot`` alone would leave the host in reach: mmdebstrap's ``/proc``
in ``ROOT`` is the host's (``/proc/$PPID/root`` is the host's ``/``), its ``/sys`` is
the host's, root can ``mknod`` a host disk or chroot back out. So, in order:

1. new mount, PID, UTS and IPC namespaces; every mount made here stays here;
2. what mmdebstrap mounted inside ``ROOT`` (host ``/proc``, ``/sys``, ``/dev`` nodes) is
   detached, and ``ROOT`` becomes the root with ``pivot_root``: the host's tree is not
   under it, above it, nor anywhere a path or ``..`` can reach;
3. a fresh ``/proc`` of the new PID namespace (only the step's own processes; its
   writable kernel knobs read-only, as container runtimes do), a ``/dev`` on tmpfs with
   ``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty`` and a private ``pts``
   (no disk, no other device), an empty read-only ``/sys``;
4. the capability bounding set cut to what package installs use (chown, file modes,
   setuid, kill, chroot...): no ``CAP_SYS_ADMIN`` (no mount, so nothing here is undone),
   ``CAP_MKNOD``, ``CAP_DAC_READ_SEARCH`` (``open_by_handle_at``), ``CAP_SYS_MODULE``,
   ``CAP_SYS_RAWIO``, ``CAP_SYS_PTRACE``, ``CAP_NET_ADMIN``, ``CAP_NET_RAW``...

Each ``--read FILE`` is opened before the host goes out of reach and handed to ``argv``
as descriptor 3, 4, ... (``/proc/self/fd/3`` inside): how a recipe's file gets in
without the host writing into ``ROOT``. The step is PID 1 of its namespace, so every
process it left behind dies with it, and it dies with this process. The network stays
the host's (a step may download). Standard library only: it may run as a root that can
import nothing of ours.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import sys

FAILED = 125
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
SIGKILL = 9
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# What dpkg, maintainer scripts and apt's privilege drop need, nothing that reaches the
# kernel or the host: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
# NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE, SETFCAP (Docker's default set without MKNOD
# and NET_RAW).
KEPT_CAPABILITIES = frozenset({0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31})
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}
# /proc entries that write to the kernel (read-only) or tell about the host (hidden).
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "asound", "mtrr")
_PROC_HIDDEN = ("kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kmsg")
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
}

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    """A step of entering the sandbox failed (the sandbox is never entered half-made)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        raise SandboxError(f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {fstype or source} on {target}",
    )


def _umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def mounts_under(root: str) -> list[str]:
    """Mount points strictly inside ``root``, deepest first."""
    with open("/proc/self/mountinfo") as info:
        points = [_unescape(line.split()[4]) for line in info]
    inside = [p for p in points if p.startswith(root.rstrip("/") + "/")]
    return sorted(set(inside), key=len, reverse=True)


def _detach_mounts(root: str) -> None:
    for point in mounts_under(root):
        try:
            _umount(point)
        except SandboxError:
            pass  # went with a parent detached before it; checked below
    left = mounts_under(root)
    if left:
        raise SandboxError(f"cannot detach what is mounted in the root: {', '.join(left)}")


def _directory(path: str) -> str:
    """``path`` if it is a real directory (a step before may have made it a symlink)."""
    if os.path.islink(path) or not os.path.isdir(path):
        raise SandboxError(f"{path} is not a directory of the root file system")
    return path


def _read_only(path: str) -> None:
    _mount(path, path, None, MS_BIND | MS_REC)
    _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _make_dev(root: str) -> None:
    dev = _directory(f"{root}/dev")
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    for name in DEVICES:
        node = f"{dev}/{name}"
        os.close(os.open(node, os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/dev/{name}", node, None, MS_BIND)
    for name, target in _DEV_LINKS.items():
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/pts")
    os.mkdir(f"{dev}/shm", 0o1777)
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    try:  # a terminal is a nicety for a build step, not a need
        _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666")
    except SandboxError:
        pass


def _make_proc(root: str) -> None:
    proc = _directory(f"{root}/proc")
    _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in _PROC_READ_ONLY:
        if os.path.exists(f"{proc}/{name}"):
            _read_only(f"{proc}/{name}")
    for name in _PROC_HIDDEN:
        if os.path.isfile(f"{proc}/{name}"):
            _mount(f"{root}/dev/null", f"{proc}/{name}", None, MS_BIND)
    sys_dir = _directory(f"{root}/sys")
    _mount("tmpfs", sys_dir, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555")


def _pivot_into(root: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SandboxError(f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(root)
    # pivot_root(".", "."): the old root is stacked under the new one, then detached.
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _umount(".")
    os.chdir("/")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities(last: int) -> None:
    for cap in range(last + 1):
        if cap not in KEPT_CAPABILITIES:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    # Inheritable capabilities would survive exec as root beside the bounding set.
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    for half in data:
        half.inheritable = 0
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _hand_over(handed: list[int]) -> None:
    """``handed`` as descriptors 3, 4, ...; every other descriptor closed (one inherited
    from the host, a directory above all, would be a way back out)."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3 + len(handed)) for fd in handed]
    for fd in handed:
        os.close(fd)
    for number, fd in enumerate(high, 3):
        os.dup2(fd, number)
    os.closerange(3 + len(handed), os.sysconf("SC_OPEN_MAX"))


def enter(root: str, reads: list[str], argv: list[str]) -> None:
    """In the new namespaces (PID 1 of its PID namespace): build the sandbox, exec ``argv``."""
    _libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    with open("/proc/sys/kernel/cap_last_cap") as last_cap:
        last = int(last_cap.read())
    handed = [os.open(path, os.O_RDONLY | os.O_NOFOLLOW) for path in reads]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _detach_mounts(root)
    _mount(root, root, None, MS_BIND)
    _make_dev(root)
    _make_proc(root)
    _pivot_into(root)
    _hand_over(handed)
    _drop_capabilities(last)
    os.execve(argv[0], argv, ENV)


def main(args: list[str]) -> int:
    if "--" not in args or not args or args[0].startswith("-"):
        print("usage: sandbox_enter.py ROOT [--read FILE]... -- ARGV...", file=sys.stderr)
        return FAILED
    split = args.index("--")
    root, options, argv = os.path.realpath(args[0]), args[1:split], args[split + 1 :]
    if len(options) % 2 or any(flag != "--read" for flag in options[::2]) or not argv:
        print("usage: sandbox_enter.py ROOT [--read FILE]... -- ARGV...", file=sys.stderr)
        return FAILED
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC
    if _libc.unshare(flags) != 0:
        print(f"adare-sandbox: unshare: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return FAILED
    child = os.fork()
    if child == 0:
        try:
            enter(root, options[1::2], argv)
        except (SandboxError, OSError) as exc:
            print(f"adare-sandbox: {exc}", file=sys.stderr)
        os._exit(FAILED)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
