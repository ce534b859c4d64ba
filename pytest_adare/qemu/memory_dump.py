"""The guest's RAM to a file with QMP ``dump-guest-memory`` (ELF, kdump or win-dmp).

The dump runs detached (``detach=true``) and is followed with ``query-dump`` until it
completes, fails or ``timeout`` passes, so QMP stays responsive and the wait is bounded
and ends at once when QEMU dies. The guest is paused for the dump (RAM does not change
under it) and resumed after unless ``resume=False``. QEMU writes to a hidden
``.part`` file in the target's directory, renamed only when the dump completed: a
failed or timed-out dump leaves nothing behind.

ELF (``format="elf"``) is what Volatility 3, ``crash`` and ``gdb`` read: one
``PT_LOAD`` segment per guest RAM block, with physical addresses. ``kdump-*`` are
makedumpfile's compressed formats; ``win-dmp`` is a Windows crash dump (a Windows guest
with the ``vmcoreinfo`` device only; QEMU refuses it otherwise).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pytest_adare.errors import VMTimeout
from pytest_adare.machine.results import (
    DUMP_FORMATS,
    DUMP_TIMEOUT,
    DumpFormat,
    MemoryDump,
    MemoryDumpFailed,
    discard_file,
    new_file_target,
)
from pytest_adare.machine_tools.run_state import QMP_TIMEOUT, QmpMachine, paused

__all__ = [
    "DUMP_FORMATS", "DUMP_TIMEOUT", "DumpFormat", "MemoryDump", "MemoryDumpFailed",
    "dump_guest_memory",
]  # fmt: skip

POLL_INTERVAL = 0.1


class DumpMachine(QmpMachine, Protocol):
    """Also needs the console tail, for the timeout error."""

    def console_tail(self, n: int = 40) -> list[str]: ...


async def dump_guest_memory(
    machine: DumpMachine,
    path: str | Path,
    *,
    format: DumpFormat = "elf",
    resume: bool = True,
    timeout: float = DUMP_TIMEOUT,
    progress: Callable[[int, int], None] | None = None,
) -> MemoryDump:
    """Dump the guest's RAM to ``path`` (paused, then resumed unless ``resume=False``).

    ``progress(completed, total)`` is called with ``query-dump``'s byte counts.

    :raise ValueError: unknown ``format``.
    :raise FileExistsError, FileNotFoundError: see :func:`new_file_target`.
    :raise MemoryDumpFailed: QEMU reported a failed dump.
    :raise VMTimeout: not completed within ``timeout`` s (the partial file is removed).
    :raise MachineCommandError: QEMU refused the dump (e.g. win-dmp on Linux).
    """
    if format not in DUMP_FORMATS:
        raise ValueError(f"format must be one of {DUMP_FORMATS}, got {format!r}")
    target = new_file_target(path)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    started = time.monotonic()
    try:
        async with paused(machine, resume=resume):
            await machine.aqmp(
                "dump-guest-memory", QMP_TIMEOUT,
                paging=False, protocol=f"file:{part}", detach=True, format=format,
            )  # fmt: skip
            await _await_dump(machine, timeout, progress)
        part.rename(target)
    finally:
        discard_file(part)
    return MemoryDump(target, format, target.stat().st_size, time.monotonic() - started)


async def _await_dump(
    machine: DumpMachine, timeout: float, progress: Callable[[int, int], None] | None
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        state = await machine.aqmp("query-dump", QMP_TIMEOUT)
        if progress is not None:
            progress(int(state.get("completed", 0)), int(state.get("total", 0)))
        status = state.get("status")
        if status == "completed":
            return
        if status == "failed":
            raise MemoryDumpFailed(f"QEMU reports the memory dump failed: {state}")
        if time.monotonic() > deadline:
            raise VMTimeout(
                f"the memory dump to complete (query-dump: {state})", timeout,
                machine.console_tail(),
            )  # fmt: skip
        await asyncio.sleep(POLL_INTERVAL)
