"""The per-user registry of VMs one can step into (``adare-vm list``).

A private directory (0700, owned by the user) holds one ``NAME.json`` (0600) per VM and its
owner's socket ``NAME.sock``: the process that owns the VM (a paused pytest run, ``adare-vm
run``, a keeper) serves terminals, screenshots and stop through it. The directory is
``$XDG_RUNTIME_DIR/adare-vm`` when ``$XDG_RUNTIME_DIR`` is what the XDG spec says it must be
(a directory of the user's, 0700), else ``~/.local/state/adare-vm`` in the user's home from
the password database: never a fixed name in a shared directory, which another user could
take first (``/tmp/adare-vm-registry-<uid>`` once was). Whatever is there already must be a
directory of the user's that nobody else may enter, or it is not used.

A name is ``BASE<n>@<run>``: ``vm0@4242``, ``test_login-vm0@4242``; the run is the pid of the
pytest run or ``adare-vm`` command that started the VM, and ``n`` counts within that run, so
two runs each have their ``vm0`` and neither takes the other's. Names are claimed with
``O_EXCL``, so two processes never get the same one; :func:`find` also takes ``vm0`` alone
when one run has it. An entry whose owner process died is not listed and its files are
removed (reaped).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_adare.errors import AdareError


class RegistryError(AdareError):
    """The registry directory is not private, or a name is unknown."""


@dataclass
class Entry:
    """One reachable VM."""

    name: str
    image: str
    owner: str
    """Who keeps it running: ``pytest (pid 123) tests/test_x.py::test_y``, ``adare-vm run``."""
    owner_pid: int
    run: str = ""
    """The run it belongs to (the ``@`` part of its name): the pid of the pytest run or
    ``adare-vm`` command that started it; :func:`claim` makes it ``owner_pid`` when empty."""
    since: float = field(default_factory=time.time)
    reach: dict[str, Any] = field(default_factory=dict)
    """What is needed to reach it directly: the QMP socket, the agent's address and token
    or its serial socket (why the file is 0600)."""

    @property
    def socket(self) -> Path:
        """The owner's socket."""
        return registry_dir() / f"{self.name}.sock"


SOCKET_PATH_MAX = 107
"""Bytes in a Unix socket's path (``sun_path`` is 108, with its NUL)."""
RUN_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,32}")


def _private(path: Path) -> str | None:
    """Why ``path`` is not a directory of this user that nobody else may enter, else None."""
    try:
        info = path.lstat()
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return f"{path} is not a directory of uid {os.getuid()}"
    if info.st_mode & 0o077:
        return f"{path} is open to other users (mode {info.st_mode & 0o777:o})"
    return None


def _home() -> Path:
    # The password database's home, not $HOME: sudo and su may leave $HOME pointing at
    # another user's home, where this user's directory would lock that user out.
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # a uid without an entry (some containers): its own $HOME, if any
        home = os.environ.get("HOME")
        if not home:
            raise RegistryError(
                f"uid {os.getuid()} has no home and XDG_RUNTIME_DIR is not set: no private "
                "place for the registry (set XDG_RUNTIME_DIR to a directory of yours, 0700)"
            ) from None
        return Path(home)


def registry_dir() -> Path:
    """The user's private registry directory, created 0700 if missing.

    :raise RegistryError: it exists but belongs to someone else or others may enter it,
        or it cannot be made.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and _private(Path(runtime)) is None:
        base = Path(runtime) / "adare-vm"
    else:
        state = _home() / ".local" / "state"
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RegistryError(f"cannot make {state} for the registry: {exc.strerror}") from None
        base = state / "adare-vm"
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass  # checked below like a new one: a directory of ours, 0700
    except OSError as exc:
        raise RegistryError(f"cannot make the registry {base}: {exc.strerror}") from None
    problem = _private(base)
    if problem is not None:
        raise RegistryError(f"{problem}: not using it as the registry")
    return base


def owner_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        return fields[0] != b"Z"
    return True


def claim(base: str, entry: Entry) -> Entry:
    """Write ``entry`` under the first free name ``BASE0@RUN``, ``BASE1@RUN``…; the entry named.

    ``base`` is ``vm`` or ``TEST-vm`` (a paused test's VMs); ``RUN`` is ``entry.run``
    (``entry.owner_pid`` when empty).

    :raise RegistryError: a run label that is not 1-32 letters, digits, ``_.-``; no free
        name; or a socket path longer than Unix sockets take.
    """
    entry.run = entry.run or str(entry.owner_pid)
    if not RUN_LABEL.fullmatch(entry.run):
        raise RegistryError(f"a run is named by 1-32 of A-Z a-z 0-9 _ . -, not {entry.run[:40]!r}")
    directory = registry_dir()
    reap()
    for index in range(1000):
        name = f"{base}{index}@{entry.run}"
        path = directory / f"{name}.json"
        socket = directory / f"{name}.sock"
        if len(os.fsencode(socket)) > SOCKET_PATH_MAX:
            raise RegistryError(
                f"the socket {socket} would be longer than {SOCKET_PATH_MAX} bytes: set "
                "XDG_RUNTIME_DIR to a shorter directory of yours (0700)"
            )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        entry.name = name
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(entry), out)
        return entry
    raise RegistryError(f"no free name {base}0@{entry.run}..{base}999@{entry.run} in {directory}")


def update(entry: Entry) -> None:
    """Rewrite ``entry`` (a new owner, say) in place, 0600."""
    path = registry_dir() / f"{entry.name}.json"
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(entry), out)
    os.replace(path.with_suffix(".tmp"), path)


def remove(name: str) -> None:
    """Forget ``name`` (its entry and socket)."""
    directory = registry_dir()
    for suffix in (".json", ".sock"):
        with contextlib.suppress(FileNotFoundError):
            (directory / f"{name}{suffix}").unlink()


def _read(path: Path) -> Entry | None:
    try:
        data = json.loads(path.read_text())
        return Entry(**data)
    except (OSError, ValueError, TypeError):
        return None


def reap() -> None:
    """Remove the entries whose owner died."""
    for path in registry_dir().glob("*.json"):
        entry = _read(path)
        if entry is None or not owner_alive(entry.owner_pid):
            remove(path.stem)


def entries() -> list[Entry]:
    """The live entries, oldest first (dead owners' entries are reaped first)."""
    reap()
    found = [e for e in map(_read, registry_dir().glob("*.json")) if e is not None]
    return sorted(found, key=lambda e: e.since)


def short_name(name: str) -> str:
    """``name`` without its run: ``vm0@4242`` -> ``vm0``."""
    return name.rpartition("@")[0] or name


def find(name: str) -> Entry:
    """The live entry ``name``, or the one entry whose name is ``name@RUN``.

    :raise RegistryError: there is none (the message lists the names there are), or
        several runs have ``name`` (it lists them: the name to give is one of those).
    """
    live = entries()
    for entry in live:
        if entry.name == name:
            return entry
    same = [e for e in live if short_name(e.name) == name]
    if len(same) == 1:
        return same[0]
    if same:
        choices = "; ".join(f"{e.name} ({e.owner})" for e in same[:10])
        more = f"; and {len(same) - 10} more" if len(same) > 10 else ""
        raise RegistryError(
            f"{len(same)} runs have a VM named {name[:100]!r}: {choices}{more}; give the whole name"
        )
    names = ", ".join(e.name for e in live[:20]) or "none"
    raise RegistryError(f"no running VM named {name[:100]!r} (running: {names}; see adare-vm list)")
