"""Saved ready states of machines, kept in the cache for warm starts.

A saved state is a directory under ``$XDG_CACHE_HOME/pytest-adare/warm/<key>/``:

- ``state.bin``: the paused machine's RAM and device state (:mod:`.migration`);
- ``disk.qcow2``: its disk overlay at that moment (backed by the image's base disk);
- ``boot/<name>``: the files QEMU was started with that the state depends on (the
  initrd and fw_cfg files: their sizes are part of the machine's state);
- ``meta.json`` (owner-only): what the caller needs to use the state (e.g. the
  agent's token at the time), written last, so a directory without it is not a state.

``key`` is a digest of everything that decides whether a state fits a new machine
(:func:`state_key`); the caller names those parts. Directories are built under a
temporary name and renamed into place, so readers never see half a state, and
writers of the same key take :func:`state_lock` (another pytest session or xdist
worker saving the same state waits, then finds it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_adare.cache_dir import cache_root, exclusive_lock
from pytest_adare.qemu.migration import MigratingMachine, save_state

FORMAT_VERSION = "1"
"""Bumped whenever the layout or the meaning of a saved state changes."""
STATE_LOCK_TIMEOUT = 600.0
KEEP_STATES = 8
"""Saved states kept in the cache; the least recently used beyond that are removed
(each is about the guest's used RAM plus its disk changes, 100-400 MB)."""


@dataclass(frozen=True)
class SavedState:
    """One saved ready state in the cache."""

    key: str
    directory: Path
    meta: Mapping[str, str]

    @property
    def state(self) -> Path:
        return self.directory / "state.bin"

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    def file(self, name: str) -> Path:
        """A boot file saved with the state (see :func:`save_machine_state`)."""
        return self.directory / "boot" / name


def states_root() -> Path:
    """``$XDG_CACHE_HOME/pytest-adare/warm``."""
    return cache_root() / "warm"


def state_key(parts: Mapping[str, str]) -> str:
    """A short digest of ``parts`` (every fact a state depends on, by name)."""
    text = json.dumps({"format": FORMAT_VERSION, **parts}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def find_state(key: str, root: Path | None = None) -> SavedState | None:
    """The complete saved state for ``key``, or None."""
    directory = (root or states_root()) / key
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        return None
    saved = SavedState(key, directory, meta)
    if not (saved.state.is_file() and saved.disk.is_file()):
        return None
    with contextlib.suppress(OSError):  # last use, for pruning the least recently used
        os.utime(directory)
    return saved


@contextmanager
def state_lock(key: str, root: Path | None = None) -> Iterator[None]:
    """Hold the lock for saving ``key`` (other processes wait, then find the state)."""
    lock = (root or states_root()) / f".{key}.lock"
    with exclusive_lock(lock, STATE_LOCK_TIMEOUT, f"saving the warm state {key}"):
        yield


class StateMachine(MigratingMachine, Protocol):
    """What saving needs of a :class:`~pytest_adare.qemu.machine.Machine`."""

    overlay_path: Path


async def save_machine_state(
    machine: StateMachine,
    key: str,
    files: Mapping[str, Path],
    meta: Mapping[str, str],
    root: Path | None = None,
    timeout: float = 300.0,
) -> SavedState:
    """Save ``machine`` (paused afterwards: ``cont`` resumes it) as the state for ``key``.

    ``files`` are copied into ``boot/`` under their names; ``meta`` goes to
    ``meta.json``. An existing complete state for ``key`` is kept (and returned).

    :raise MigrationError, VMTimeout: the state could not be written.
    """
    base = root or states_root()
    existing = await asyncio.to_thread(find_state, key, base)
    if existing is not None:
        return existing
    work = base / f".{key}.{secrets.token_hex(4)}"
    try:
        await asyncio.to_thread(_prepare_dir, work, files)
        await save_state(machine, work / "state.bin", timeout)
        # The migration completed, so QEMU flushed the overlay: a plain copy is consistent.
        await asyncio.to_thread(shutil.copyfile, machine.overlay_path, work / "disk.qcow2")
        await asyncio.to_thread(_write_meta, work / "meta.json", meta)
        saved = await asyncio.to_thread(_publish, work, base / key, key)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    await asyncio.to_thread(prune_states, base, KEEP_STATES, saved.key)
    return saved


def _prepare_dir(work: Path, files: Mapping[str, Path]) -> None:
    (work / "boot").mkdir(parents=True, mode=0o700)
    for name, source in files.items():
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"bad boot file name {name!r}")
        shutil.copyfile(source, work / "boot" / name)


def _write_meta(path: Path, meta: Mapping[str, str]) -> None:
    # Owner-only: it may hold the saved agent's token.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(dict(meta), out)


def _publish(work: Path, target: Path, key: str) -> SavedState:
    try:
        work.rename(target)
    except OSError:  # another process published the same key first: theirs is as good
        pass
    saved = find_state(key, target.parent)
    if saved is None:
        raise OSError(f"the warm state {target} is incomplete after saving")
    return saved


def prune_states(root: Path, keep: int, spare: str) -> list[str]:
    """Remove all but the ``keep`` most recently used states (never ``spare``); their keys.

    A state another process is loading at that moment fails to load there and that VM
    boots cold: correct, only slower.
    """
    states = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    states.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for directory in states[keep:]:
        if directory.name != spare:
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory.name)
    return removed


def discard_state(saved: SavedState) -> None:
    """Remove a state that failed to load (it will be saved again by a cold boot)."""
    shutil.rmtree(saved.directory, ignore_errors=True)
