"""Pausing a running guest for a consistent look (``stop`` / ``cont`` over QMP).

QEMU drains and flushes every block device when it stops the VM (qcow2 writes its
metadata caches back to the host file even with ``cache=unsafe``), so while
:func:`paused` holds, the overlay on the host is a consistent disk and RAM does not
change.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

QMP_TIMEOUT = 30.0


class QmpMachine(Protocol):
    """What pausing needs of a machine that speaks QMP (the QEMU backend's
    :class:`~pytest_adare.qemu.machine.Machine`)."""

    async def aqmp(self, cmd: str, timeout: float = 60.0, **args: Any) -> Any: ...
    def is_running(self) -> bool: ...


async def is_guest_running(machine: QmpMachine) -> bool:
    """True when the guest's CPUs run (``query-status``)."""
    status = await machine.aqmp("query-status", QMP_TIMEOUT)
    return bool(status.get("running")) if isinstance(status, dict) else False


@asynccontextmanager
async def paused(machine: QmpMachine, *, resume: bool = True) -> AsyncIterator[float]:
    """Stop the guest's CPUs for the block; yields the host's epoch time at the pause.

    The guest is resumed on exit when it was running before and ``resume`` is true
    (also when the block raised); a guest that was already paused stays paused.
    """
    was_running = await is_guest_running(machine)
    if was_running:
        await machine.aqmp("stop", QMP_TIMEOUT)
    try:
        yield time.time()
    finally:
        if was_running and resume and machine.is_running():
            await machine.aqmp("cont", QMP_TIMEOUT)


async def resume_guest(machine: QmpMachine) -> None:
    """Let a paused guest run again (``cont``); nothing when it already runs."""
    if not await is_guest_running(machine):
        await machine.aqmp("cont", QMP_TIMEOUT)
