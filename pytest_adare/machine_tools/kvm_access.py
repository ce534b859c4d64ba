"""Why this user may not open ``/dev/kvm``, and the commands that would let it.

The advice follows from the device (its owner, group and mode) and the user's groups
alone, never from an earlier accelerator verdict: a device whose group may read and
write it needs the user in that group; a device only its owner may open (a container's
``crw------- root root``) needs giving to the ``kvm`` group first, as udev does on
Debian, or joining its group would not help.

Example::

    reason = kvm_unusable_reason()
    # /dev/kvm: Permission denied; /dev/kvm is root's alone (mode 0600): run sudo chgrp
    # kvm /dev/kvm && sudo chmod 0660 /dev/kvm, then sudo usermod -aG kvm alice and ...
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd
import stat
from dataclasses import dataclass

KVM_GROUP = "kvm"
"""The group udev gives ``/dev/kvm`` on Debian and most distributions."""

UNTIL_THEN = "(until then guests run under TCG, several times slower)"


def kvm_unusable_reason(device: str = "/dev/kvm") -> str | None:
    """None when ``device`` opens read-write, else why not (for a device that exists
    but is not this user's, also how to get it)."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except PermissionError as exc:
        return f"{device}: {exc.strerror}; {access_fix(device, UserGroups.of_this_process())}"
    except OSError as exc:
        return f"{device}: {exc.strerror or exc}"
    os.close(fd)
    return None


@dataclass(frozen=True)
class UserGroups:
    """A user's name, the groups its process has now, and the groups the user database
    lists it in (these differ until the user logs in again after ``usermod -aG``)."""

    user: str
    process_gids: frozenset[int]
    listed_gids: frozenset[int]

    @classmethod
    def of_this_process(cls) -> UserGroups:
        user = getpass.getuser()
        process = frozenset({os.getegid(), *os.getgroups()})
        try:
            listed = frozenset(os.getgrouplist(user, pwd.getpwnam(user).pw_gid))
        except KeyError:  # a uid with no passwd entry: only what the process has
            listed = process
        return cls(user, process, listed)


def access_fix(device: str, groups: UserGroups) -> str:
    """What stops ``groups.user`` from opening ``device`` read-write, and the commands
    that would let it, from the device's owner, group and mode."""
    try:
        info = os.stat(device)
    except OSError as exc:
        return f"{device} cannot be examined ({exc.strerror or exc})"
    group = _group_name(info.st_gid)
    mode = f"{stat.S_IMODE(info.st_mode):04o}"
    if info.st_mode & 0o060 == 0o060:  # the group may read and write it
        if info.st_gid in groups.process_gids:
            return (
                f"{device} ({mode}, group {group}) lets {group} in and this process is "
                "in it: an ACL, a security module or a container's device rules refuse it"
            )
        if info.st_gid in groups.listed_gids:
            return (
                f"{groups.user} is in {device}'s group {group} since this session began: "
                f"log in again (or run newgrp {group}) {UNTIL_THEN}"
            )
        return (
            f"{groups.user} is not in its group {group}: run sudo usermod -aG {group} "
            f"{groups.user} and log in again {UNTIL_THEN}"
        )
    return f"{device} is {_user_name(info.st_uid)}'s alone (mode {mode}): " + _share_with_kvm(
        device, groups
    )


def _share_with_kvm(device: str, groups: UserGroups) -> str:
    """The udev way for a device only its owner may open: group kvm, mode 0660."""
    try:
        kvm_gid: int | None = grp.getgrnam(KVM_GROUP).gr_gid
    except KeyError:
        kvm_gid = None
    make = "" if kvm_gid is not None else f"sudo groupadd --system {KVM_GROUP} && "
    steps = f"run {make}sudo chgrp {KVM_GROUP} {device} && sudo chmod 0660 {device}"
    if kvm_gid is not None and kvm_gid in groups.process_gids:
        return f"{steps} {UNTIL_THEN}"
    if kvm_gid is not None and kvm_gid in groups.listed_gids:
        return f"{steps}, then log in again (or run newgrp {KVM_GROUP}) {UNTIL_THEN}"
    return (
        f"{steps}, then sudo usermod -aG {KVM_GROUP} {groups.user} and log in again "
        f"{UNTIL_THEN}"
    )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
