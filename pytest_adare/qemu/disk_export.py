"""The guest's disk at one point in time, as a raw or qcow2 file on the host.

Three steps make the copy consistent:

1. the guest's file systems are quiesced: ``guest-fsfreeze-freeze`` through qemu-ga
   (each file system is synced and its journal checkpointed, so the copy needs no
   journal replay and tools such as ``debugfs`` see every file), or, when QGA is not
   there, a ``flush`` the caller gives (the VM passes the agent running ``sync``);
2. the guest is paused: QEMU drains and flushes the block layer on ``stop`` (qcow2
   writes its metadata caches back to the overlay file even with ``cache=unsafe``),
   so the overlay on the host is complete and no longer changes;
3. ``qemu-img convert -U`` reads the overlay with its backing chain (the base image)
   into one stand-alone file; ``-U`` (force share) because QEMU holds the image lock.

The guest is resumed and thawed afterwards, also on failure. A block job
(``blockdev-backup``) could copy while the guest runs, but needs a target node and a
job to watch; the pause costs seconds at most and gives the same point in time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from pytest_adare.errors import QGAError, VMTimeout
from pytest_adare.qemu.memory_dump import discard_file, new_file_target
from pytest_adare.qemu.reaper import spawn
from pytest_adare.qemu.run_state import QmpMachine, paused

DiskFormat = Literal["raw", "qcow2"]
DISK_FORMATS: tuple[DiskFormat, ...] = get_args(DiskFormat)
CONVERT_TIMEOUT = 600.0
FREEZE_TIMEOUT = 60.0


class DiskMachine(QmpMachine, Protocol):
    """What an export needs of a :class:`~pytest_adare.qemu.machine.Machine`."""

    @property
    def overlay_path(self) -> Path: ...
    def console_tail(self, n: int = 40) -> list[str]: ...


class FreezeAgent(Protocol):
    """qemu-ga as :class:`~pytest_adare.qemu.qga.AsyncQGAClient` offers it."""

    async def execute(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> Any: ...


Flush = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class DiskExport:
    """A finished export: the file, its format and size, how the guest was quiesced."""

    path: Path
    format: str
    size: int
    seconds: float
    quiesced: str


@asynccontextmanager
async def quiesced(qga: FreezeAgent | None, flush: Flush | None) -> AsyncIterator[str]:
    """Quiesce the guest's file systems for the block; yields how (one phrase).

    qemu-ga's freeze is tried first and thawed on exit; when it fails, ``flush`` runs
    instead. Neither: the guest's caches are not flushed (said in the phrase).
    """
    frozen = False
    how = "not quiesced (no qemu-ga and no flush)"
    if qga is not None:
        try:
            count = await qga.execute("guest-fsfreeze-freeze", timeout=FREEZE_TIMEOUT)
            frozen, how = True, f"qemu-ga fsfreeze ({count} file system(s))"
        except QGAError as error:
            how = f"qemu-ga fsfreeze failed ({str(error).splitlines()[0]})"
    if not frozen and flush is not None:
        await flush()
        how = f"{how}; guest sync" if qga is not None else "guest sync"
    try:
        yield how
    finally:
        if frozen:
            assert qga is not None
            await qga.execute("guest-fsfreeze-thaw", timeout=FREEZE_TIMEOUT)


async def convert_disk(
    source: Path,
    target: Path,
    format: DiskFormat,
    *,
    timeout: float = CONVERT_TIMEOUT,
    console_tail: Callable[[], list[str]] = list,
) -> None:
    """``qemu-img convert -U`` of ``source`` (with its backing chain) to ``target``.

    :raise RuntimeError: qemu-img failed (its output in the message).
    :raise VMTimeout: it ran longer than ``timeout`` s (killed; ``target`` removed).
    """
    argv = ["qemu-img", "convert", "-U", "-f", "qcow2", "-O", format, str(source), str(target)]
    proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = await asyncio.wait_for(asyncio.to_thread(proc.communicate), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await asyncio.to_thread(proc.wait)
        discard_file(target)
        raise VMTimeout(f"qemu-img convert of {source}", timeout, console_tail()) from None
    if proc.returncode != 0:
        discard_file(target)
        text = output.decode(errors="replace").strip()
        raise RuntimeError(f"qemu-img convert failed ({proc.returncode}): {text}")


async def export_disk(
    machine: DiskMachine,
    path: str | Path,
    *,
    format: DiskFormat = "raw",
    qga: FreezeAgent | None = None,
    flush: Flush | None = None,
    timeout: float = CONVERT_TIMEOUT,
) -> DiskExport:
    """Quiesce, pause, copy the VM's current disk to ``path``, resume, thaw.

    :raise ValueError: unknown ``format``.
    :raise FileExistsError, FileNotFoundError: ``path`` exists, or its directory does not.
    """
    if format not in DISK_FORMATS:
        raise ValueError(f"format must be one of {DISK_FORMATS}, got {format!r}")
    target = new_file_target(path)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    started = time.monotonic()
    try:
        async with quiesced(qga, flush) as how, paused(machine):
            await convert_disk(
                machine.overlay_path, part, format, timeout=timeout,
                console_tail=machine.console_tail,
            )  # fmt: skip
        part.rename(target)
    finally:
        discard_file(part)
    return DiskExport(target, format, target.stat().st_size, time.monotonic() - started, how)
