"""The per-user registry of VMs one can step into (``adare-vm list``).

A private directory (0700, owned by the user) in ``$XDG_RUNTIME_DIR``, else
``/tmp/adare-vm-registry-<uid>``, holds one ``NAME.json`` (0600) per VM and its owner's socket
``NAME.sock``: the process that owns the VM (a paused pytest run, ``adare-vm run``, a
keeper) serves terminals, screenshots and stop through it. Names are claimed with
``O_EXCL``, so two processes never get the same one. An entry whose owner process died
is not listed and its files are removed (reaped).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
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
    since: float = field(default_factory=time.time)
    reach: dict[str, Any] = field(default_factory=dict)
    """What is needed to reach it directly: the QMP socket, the agent's address and token
    or its serial socket (why the file is 0600)."""

    @property
    def socket(self) -> Path:
        """The owner's socket."""
        return registry_dir() / f"{self.name}.sock"


def registry_dir() -> Path:
    """The user's private registry directory, created 0700 if missing.

    :raise RegistryError: it exists but belongs to someone else or others may enter it.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = (
        Path(runtime) / "adare-vm"
        if runtime and os.path.isdir(runtime)
        else Path(tempfile.gettempdir()) / f"adare-vm-registry-{os.getuid()}"
    )
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RegistryError(f"{base} is not a directory of uid {os.getuid()}: not using it")
    if info.st_mode & 0o077:
        raise RegistryError(f"{base} is open to other users (mode {info.st_mode & 0o777:o})")
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
    """Write ``entry`` under the first free name ``BASE0``, ``BASE1``…; the entry named.

    ``base`` is ``vm`` or ``TEST-vm`` (a paused test's VMs).
    """
    directory = registry_dir()
    reap()
    for index in range(1000):
        name = f"{base}{index}"
        path = directory / f"{name}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        entry.name = name
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(entry), out)
        return entry
    raise RegistryError(f"no free name {base}0..{base}999 in {directory}")


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


def find(name: str) -> Entry:
    """The live entry ``name``.

    :raise RegistryError: there is none (the message lists the names there are).
    """
    for entry in entries():
        if entry.name == name:
            return entry
    names = ", ".join(e.name for e in entries()) or "none"
    raise RegistryError(f"no running VM named {name!r} (running: {names}; see adare-vm list)")
