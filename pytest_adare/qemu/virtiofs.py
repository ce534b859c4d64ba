"""A writable shared folder: the host folder itself, served to the guest over virtiofs
by QEMU's ``virtiofsd``, which runs in a user namespace of its own so that it acts as
nobody but the folder's owner.

Why a user namespace, for root too: virtiofsd does each guest request with the guest's
uid and gid. Run plainly as root, a guest's root would create root's files in the host
folder (a set-user-ID shell among them) and device nodes. In its own namespace it can
only be the ids mapped there:

- the guest's uid and gid 1000 (the built-in images' desktop user, the first account a
  Debian install makes) are the folder's owner: what that user writes is the owner's on
  the host, and the owner's files are that user's in the guest;
- the guest's root is an unprivileged id: the running user's first subordinate uid and
  gid (``/etc/subuid``, ``/etc/subgid``), or ``nobody`` when root runs the tests; its
  writes land as that id;
- every other guest id is unmapped: the guest sees such files as ``nobody`` and its
  writes as such a user fail.

So an ordinary user may share a folder they own (and needs a subordinate id range, which
Debian's ``adduser`` gives every account); root may share a folder an ordinary user owns,
never one root owns. The folder's path must be reachable by its owner: virtiofsd opens it
as the namespace's root, which has no rights over directories of unmapped owners.

How it starts: the image builder's own way into a user namespace
(:class:`~pytest_adare.image.userns.NamespaceRoot`, ``userns_enter.py``: the ids mapped
by root itself or through ``newuidmap``/``newgidmap``, then root of the namespace, with
the parent-death signal) runs ``virtiofsd --fd`` on a socket this process made.
virtiofsd ends when QEMU closes the socket; :meth:`VirtiofsDaemon.stop` ends it in any
case.

Example::

    daemon = VirtiofsDaemon.start(share, socket_dir / "fs0.sock", workdir / "virtiofsd0.log")
    ...  # QEMU: -chardev socket,path=<daemon.socket_path> -device vhost-user-fs-pci,...
    daemon.stop()
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.host_access import ShareSpec
from pytest_adare.image.userns import NamespaceRoot, subordinate_range
from pytest_adare.machine_tools.reaper import spawn
from pytest_adare.machine_tools.share import ShareError

VIRTIOFSD_PATHS = ("/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd")
"""Where Debian's QEMU (``qemu-system-common``) and other distributions install it."""
GUEST_USER_ID = 1000
"""The guest id that is the folder's owner on the host (uid and gid)."""
NOBODY = 65534
START_TIMEOUT = 10.0
"""Seconds for virtiofsd to be listening."""


def find_virtiofsd() -> str:
    """The virtiofsd binary.

    :raise ShareError: there is none (names the package).
    """
    for path in VIRTIOFSD_PATHS:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("virtiofsd")
    if found:
        return found
    raise ShareError(
        "a writable share needs QEMU's virtiofsd (Debian: the qemu-system-common package; "
        f"looked in {', '.join(VIRTIOFSD_PATHS)} and PATH)"
    )


@dataclass(frozen=True)
class IdMaps:
    """The namespace's ``uid_map`` and ``gid_map`` lines: inner, outer, count."""

    uids: tuple[tuple[int, int, int], ...]
    gids: tuple[tuple[int, int, int], ...]

    @property
    def owner(self) -> int:
        """The host uid that the guest's user (:data:`GUEST_USER_ID`) is."""
        return next(outer for inner, outer, _ in self.uids if inner == GUEST_USER_ID)

    def arg(self, kind: str) -> str:
        """The ``kind`` (``uid``/``gid``) map as ``newuidmap`` takes it: ``inner outer
        count ...``."""
        rows = self.uids if kind == "uid" else self.gids
        return " ".join(f"{inner} {outer} {count}" for inner, outer, count in rows)


def id_maps(spec: ShareSpec, runner_uid: int | None = None) -> IdMaps:
    """The id maps for sharing ``spec.host`` as the user ``runner_uid`` (default: us).

    :raise ShareError: the folder is not the runner's (an ordinary runner), is root's
        (root running), or the runner has no subordinate ids for the guest's root.
    """
    runner = os.getuid() if runner_uid is None else runner_uid
    try:
        owner = os.stat(spec.host).st_uid
    except OSError as error:
        raise ShareError(f"share {spec.host}: {error.strerror}") from None
    if runner == 0:
        if owner == 0:
            raise ShareError(
                f"share {spec}: the folder is root's, and the guest's user would write in it "
                "as root; give it to an ordinary user (chown) or run the tests as one"
            )
        try:
            owner_gid = pwd.getpwuid(owner).pw_gid
        except KeyError:
            owner_gid = os.stat(spec.host).st_gid
        return IdMaps(
            uids=((0, NOBODY, 1), (GUEST_USER_ID, owner, 1)),
            gids=((0, NOBODY, 1), (GUEST_USER_ID, owner_gid, 1)),
        )
    if owner != runner:
        raise ShareError(
            f"share {spec}: a writable share must be a folder you own (its owner is uid "
            f"{owner}, you are {runner})"
        )
    name = _user_name(runner)
    sub_uids = subordinate_range(Path("/etc/subuid"), name, runner)
    sub_gids = subordinate_range(Path("/etc/subgid"), name, runner)
    if sub_uids is None or sub_gids is None:
        raise ShareError(
            f"share {spec}: a writable share maps the guest's root to one of your "
            f"subordinate ids, and {name} has none in /etc/subuid and /etc/subgid "
            f"(sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {name})"
        )
    gid = os.getgid() if runner_uid is None else pwd.getpwuid(runner).pw_gid
    return IdMaps(
        uids=((0, sub_uids[0], 1), (GUEST_USER_ID, runner, 1)),
        gids=((0, sub_gids[0], 1), (GUEST_USER_ID, gid, 1)),
    )


def check_reachable(spec: ShareSpec, owner: int) -> None:
    """virtiofsd opens the folder as root of its namespace, which has rights only over
    what a mapped id (``owner``) owns: every directory above the folder must be the
    owner's or open to others (``o+x``).

    :raise ShareError: naming the first directory that is neither.
    """
    for parent in reversed(Path(spec.host).parents):
        try:
            info = os.stat(parent)
        except OSError as error:
            raise ShareError(f"share {spec}: {parent}: {error.strerror}") from None
        if info.st_uid != owner and not info.st_mode & 0o001:
            raise ShareError(
                f"share {spec}: virtiofsd acts as the folder's owner (uid {owner}) and cannot "
                f"reach it: {parent} is not theirs and closed to others (mode "
                f"{info.st_mode & 0o777:o}); share a folder outside it"
            )


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class VirtiofsDaemon:
    """One virtiofsd serving one writable share; see the module docstring."""

    def __init__(
        self, spec: ShareSpec, socket_path: Path, log_path: Path, proc: subprocess.Popen[bytes]
    ) -> None:
        self.spec = spec
        self.socket_path = socket_path
        self.log_path = log_path
        self._proc = proc

    @classmethod
    def start(cls, spec: ShareSpec, socket_path: Path, log_path: Path) -> VirtiofsDaemon:
        """Serve ``spec`` on a new socket at ``socket_path``; virtiofsd's words go to
        ``log_path``.

        :raise ShareError: virtiofsd is missing, the folder may not be shared (see
            :func:`id_maps`), or the daemon did not start (with its log).
        """
        binary = find_virtiofsd()
        maps = id_maps(spec)
        check_reachable(spec, maps.owner)
        socket_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(socket_path))
            listener.listen(1)
            fd = listener.fileno()
            serve = [binary, f"--fd={fd}", "-o", f"source={spec.host}",
                     "-o", "sandbox=namespace", "-o", "cache=auto"]  # fmt: skip
            namespace = NamespaceRoot(maps.arg("uid"), maps.arg("gid"))
            with log_path.open("wb") as log:
                proc = spawn(
                    namespace.wrap(serve, die_with_parent=True),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(fd,),
                )  # fmt: skip
        finally:
            listener.close()  # virtiofsd holds its own copy
        daemon = cls(spec, socket_path, log_path, proc)
        try:
            daemon._wait_serving()
        except BaseException:
            daemon.stop()
            raise
        return daemon

    def _wait_serving(self) -> None:
        """Until virtiofsd waits for QEMU (its log says so) or has ended."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if b"Waiting for vhost-user socket connection" in self._log_bytes():
                return
            if self._proc.poll() is not None:
                raise self._failure("ended before it served the folder")
            time.sleep(0.02)
        raise self._failure(f"was not serving the folder after {START_TIMEOUT:.0f} s")

    def _log_bytes(self) -> bytes:
        try:
            with self.log_path.open("rb") as log:
                return log.read(65536)
        except OSError:
            return b""

    def _failure(self, what: str) -> ShareError:
        said = self._log_bytes().decode(errors="replace").strip()[-500:]
        return ShareError(
            f"share {self.spec}: virtiofsd {what}" + (f"; its log: {said}" if said else "")
        )

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """End virtiofsd (safe to repeat); the socket file goes."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout)
        self.socket_path.unlink(missing_ok=True)
