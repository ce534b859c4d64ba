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
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from pytest_adare.errors import VMTimeout
from pytest_adare.machine.quiesce import quiesced
from pytest_adare.machine.results import (
    DISK_FORMATS,
    DiskExport,
    DiskFormat,
    Flush,
    FreezeAgent,
    discard_file,
    new_file_target,
)
from pytest_adare.machine_tools.reaper import spawn

CONVERT_TIMEOUT = 600.0


class DiskMachine(Protocol):
    """What an export needs of a machine (:class:`~pytest_adare.machine.base.MachineBackend`)."""

    @property
    def overlay_path(self) -> Path: ...
    def console_tail(self, n: int = 40) -> list[str]: ...
    def paused(self, *, resume: bool = True) -> AbstractAsyncContextManager[float]: ...


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
        async with quiesced(qga, flush) as how, machine.paused():
            await convert_disk(
                machine.overlay_path, part, format, timeout=timeout,
                console_tail=machine.console_tail,
            )  # fmt: skip
        part.rename(target)
    finally:
        discard_file(part)
    return DiskExport(target, format, target.stat().st_size, time.monotonic() - started, how)
