"""Who the root of an image build is: the host's root, or root of a user namespace.

An ordinary user builds the built-in images without root: mmdebstrap runs in its
``unshare`` mode, and every later step that touches the root file system (the adare
layout, ``depmod``, the strip, ``mkfs.ext4 -d``) runs as root of a user namespace
mapped like mmdebstrap's (root and the system ids to the user's subordinate ids from
``/etc/subuid`` / ``/etc/subgid``), so the files it made are root's in there and
``mkfs.ext4`` writes them into the image as uid 0. The user's own id is mapped too
(just above the subordinate range), so that root can also write the user's files
(the raw disk, the build log). No loop device, no mount, no setuid beyond
``newuidmap`` / ``newgidmap``::

    privilege = build_privilege()            # raises with the fix when it cannot work
    subprocess.run(privilege.wrap(["mkfs.ext4", "-d", rootfs, raw]))
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.errors import ImageError

_ENTER = Path(__file__).with_name("userns_enter.py")
ROOT_ALTERNATIVE = (
    "or build as root once and point the tests at it: "
    "sudo adare-image build debian --out DIR, then --adare-vm=DIR"
)


@dataclass(frozen=True)
class HostRoot:
    """The build runs as the host's root: commands run as they are."""

    mmdebstrap_mode: str = "root"

    def wrap(self, argv: list[str]) -> list[str]:
        return argv


@dataclass(frozen=True)
class NamespaceRoot:
    """Commands run as root of a user namespace over the user's subordinate ids."""

    uid_map: str
    gid_map: str
    mmdebstrap_mode: str = "unshare"

    def wrap(self, argv: list[str], *, die_with_parent: bool = False) -> list[str]:
        """``argv`` run as root of a new namespace with these maps; ``die_with_parent``:
        it gets SIGKILL when this process (which must be the one to start it) ends."""
        flag = [f"--die-with-parent={os.getpid()}"] if die_with_parent else []
        return [sys.executable, "-I", str(_ENTER), *flag, self.uid_map, self.gid_map, *argv]


BuildPrivilege = HostRoot | NamespaceRoot


def subordinate_range(path: Path, user: str, uid: int) -> tuple[int, int] | None:
    """The first ``start, count`` for ``user`` (or its numeric id) in a subid file."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (user, str(uid)):
            try:
                return int(fields[1]), int(fields[2])
            except ValueError:
                continue
    return None


def _id_map(start: int, count: int, own: int) -> str:
    # Inner 0..count-1 is the subordinate range (as in mmdebstrap); the user's own id
    # becomes inner ``count``, so the namespace's root may write the user's files.
    return f"0 {start} {count} {count} {own} 1"


def userns_blockers(proc: Path = Path("/proc/sys")) -> list[str]:
    """The kernel settings that forbid unprivileged user namespaces here, each with its fix."""
    checks = (
        ("kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=1"),
        ("user/max_user_namespaces", "0", "user.max_user_namespaces=65536"),
        (
            "kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 23.10 and later; or "
            "give python3 an AppArmor profile with 'userns,')",
        ),
    )
    found = []
    for name, blocking, fix in checks:
        try:
            value = (proc / name).read_text().strip()
        except OSError:
            continue
        if value == blocking:
            found.append(f"{name.replace('/', '.')} is {value}: run sudo sysctl -w {fix}")
    return found


def _refuse(reason: str) -> ImageError:
    return ImageError(
        f"building a Debian image as an ordinary user needs a user namespace: {reason}; "
        + ROOT_ALTERNATIVE
    )


def build_privilege(
    subuid: Path = Path("/etc/subuid"), subgid: Path = Path("/etc/subgid")
) -> BuildPrivilege:
    """:class:`HostRoot` for root, else a checked :class:`NamespaceRoot`.

    :raise ImageError: ``uidmap`` is missing, the user has no subordinate ids, or the
        kernel forbids user namespaces; the message names the fix and the root alternative.
    """
    if os.geteuid() == 0:
        return HostRoot()
    missing = [tool for tool in ("newuidmap", "newgidmap") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not found: run sudo apt-get install uidmap"
        raise _refuse(reason)
    user, uid, gid = getpass.getuser(), os.getuid(), os.getgid()
    uids = subordinate_range(subuid, user, uid)
    gids = subordinate_range(subgid, user, uid)
    if uids is None or gids is None:
        files = " and ".join(str(p) for p, r in ((subuid, uids), (subgid, gids)) if r is None)
        raise _refuse(
            f"{user} has no subordinate ids in {files}: run "
            f"sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"
        )
    privilege = NamespaceRoot(_id_map(*uids, uid), _id_map(*gids, gid))
    probe = subprocess.run(
        privilege.wrap(["true"]), capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        said = probe.stderr.strip().splitlines()
        why = "; ".join(userns_blockers()) or (said[-1] if said else "it failed")
        raise _refuse(f"entering one failed ({why})")
    return privilege
