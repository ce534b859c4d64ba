"""Saved ready states of machines, kept in the cache for warm starts.

A saved state is a directory under ``$XDG_CACHE_HOME/pytest-adare/warm/<key>/``:

- ``state.bin``: the paused machine's RAM and device state (a backend's ``asave_state``);
- ``disk.qcow2``: its disk overlay at that moment (backed by the image's base disk);
- ``boot/<name>``: the files QEMU was started with that the state depends on (the
  initrd and fw_cfg files: their sizes are part of the machine's state);
- ``meta.json`` (owner-only): what the caller needs to use the state (e.g. the
  agent's token at the time), written last, so a directory without it is not a state.

Everything is private: files 0600, directories 0700, and so is every directory from
the cache root down to the states, because ``state.bin`` (guest RAM) and
``disk.qcow2`` (the agent's ``config.json``) hold the saved agent's token as much as
``meta.json`` does. A state another user could have written (one of its files or
directories not ours, or writable by group or others) is not loaded:
:func:`find_state` raises :class:`UntrustedState` saying why, and the VM boots cold.
A state of ours that others can only read (saved before this rule) is made private
when it is found.

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
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_adare.cache_dir import cache_root, exclusive_lock

FORMAT_VERSION = "2"
"""Bumped whenever the layout or the meaning of a saved state changes (2: a desktop's
state is saved once an application window, not the window manager's own, has the
keyboard focus, and its meta says where screenshots went)."""
STATE_LOCK_TIMEOUT = 600.0
KEEP_STATES = 8
"""Saved states kept in the cache; the least recently used beyond that are removed
(each is about the guest's used RAM plus its disk changes, 100-400 MB)."""


class UntrustedState(PermissionError):
    """A saved state another user could have written: it is not loaded."""


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
    """The complete saved state for ``key``, or None.

    :raise UntrustedState: there is one, but another user could have written it.
    """
    base = root or states_root()
    directory = base / key
    if not os.path.lexists(directory):
        return None
    _check_trusted(base, directory)
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
    _make_private([*_private_chain(base), directory, directory / "boot"], _tree_files(directory))
    with contextlib.suppress(OSError):  # last use, for pruning the least recently used
        os.utime(directory)
    return saved


@contextmanager
def state_lock(key: str, root: Path | None = None) -> Iterator[None]:
    """Hold the lock for saving ``key`` (other processes wait, then find the state)."""
    lock = (root or states_root()) / f".{key}.lock"
    with exclusive_lock(lock, STATE_LOCK_TIMEOUT, f"saving the warm state {key}"):
        yield


class StateMachine(Protocol):
    """What saving needs of a machine (:class:`~pytest_adare.machine.base.MachineBackend`)."""

    @property
    def overlay_path(self) -> Path: ...
    async def asave_state(self, path: Path, timeout: float = 120.0) -> int: ...


async def save_machine_state(
    machine: StateMachine,
    key: str,
    files: Mapping[str, Path],
    meta: Mapping[str, str],
    root: Path | None = None,
    timeout: float = 300.0,
) -> SavedState:
    """Save ``machine`` (paused afterwards: ``aresume()`` lets it run) as the state for ``key``.

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
        await asyncio.to_thread(_prepare_dir, base, work, files)
        await machine.asave_state(work / "state.bin", timeout)
        # The migration completed, so QEMU flushed the overlay: a plain copy is consistent.
        await asyncio.to_thread(_private_copy, machine.overlay_path, work / "disk.qcow2")
        await asyncio.to_thread(_write_meta, work / "meta.json", meta)
        saved = await asyncio.to_thread(_publish, work, base / key, key)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)
    await asyncio.to_thread(prune_states, base, KEEP_STATES, saved.key)
    return saved


def _prepare_dir(base: Path, work: Path, files: Mapping[str, Path]) -> None:
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    _make_private(_private_chain(base), [])
    work.mkdir(mode=0o700)
    (work / "boot").mkdir(mode=0o700)
    for name, source in files.items():
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"bad boot file name {name!r}")
        _private_copy(source, work / "boot" / name)
    # Created owner-only before QEMU's ``cat >`` fills it (truncating keeps the mode).
    os.close(os.open(work / "state.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _private_copy(source: Path, target: Path) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as data:
        shutil.copyfileobj(data, out, 1 << 20)


def _private_chain(base: Path) -> list[Path]:
    """The directories that must be private for ``base``'s states: from the cache root
    down to ``base`` when ``base`` is in the cache, else ``base`` alone."""
    top = cache_root()
    try:
        below = base.relative_to(top).parts
    except ValueError:
        return [base]
    chain = [top]
    for part in below:
        chain.append(chain[-1] / part)
    return chain


def _tree_files(directory: Path) -> list[Path]:
    boot = directory / "boot"
    names = sorted(boot.iterdir()) if boot.is_dir() else []
    return [directory / n for n in ("state.bin", "disk.qcow2", "meta.json")] + names


def _check_trusted(base: Path, directory: Path) -> None:
    """:raise UntrustedState: a directory down to the state, or a file of it, is not
    ours or can be written by group or others (a symlink counts as not ours)."""
    chain = _private_chain(base)
    boot = directory / "boot"
    paths = [*chain, directory, boot, *_tree_files(directory)]
    for path in paths:
        if not os.path.lexists(path):
            continue
        # The cache root may be a symlink of the user's making; nothing below it may.
        info = path.stat() if path == chain[0] else path.lstat()
        why = _untrusted(info, may_be_root=path in chain)
        if why is not None:
            raise UntrustedState(
                f"the saved ready state {directory.name[:12]} is not loaded: {path} is {why}"
            )


def _untrusted(info: os.stat_result, *, may_be_root: bool) -> str | None:
    """Why another user could have written this file or directory, or None."""
    me = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        return "a symlink"
    if info.st_uid != me and not (may_be_root and info.st_uid == 0):
        return f"owned by uid {info.st_uid}, not by this user ({me})"
    if info.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _make_private(directories: list[Path], files: list[Path]) -> None:
    """Owner-only modes for what is ours (a state saved before they were the rule)."""
    for path, mode in [(d, 0o700) for d in directories] + [(f, 0o600) for f in files]:
        with contextlib.suppress(OSError):
            info = path.stat()
            if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
                path.chmod(mode)


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
