"""A running machine's whole state (RAM and devices) to a file, and back into a new QEMU.

This is QEMU's migration, aimed at a file: :func:`save_state` pauses the machine and
streams its state into ``path`` (``migrate`` to an ``exec:cat`` URI; QEMU 7.2 has no
``file:`` URI yet), :func:`load_state` feeds such a file to a QEMU started with
``incoming=True`` (``-incoming defer``) and lets the guest run on. The disk is not in
the stream: the caller keeps the disk as it was when the state was saved (a paused
machine's overlay is consistent once the migration completed, because QEMU flushes
and deactivates its block devices then).

A state loads only into a QEMU of the same version with the same devices and memory;
the caller keys its files on everything that decides that.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import Any, Protocol

from pytest_adare.errors import MigrationError

POLL_SECONDS = 0.02


class MigratingMachine(Protocol):
    """What a migration needs of :class:`~pytest_adare.qemu.machine.Machine`."""

    name: str

    async def aqmp(self, cmd: str, timeout: float = 60.0, **args: Any) -> Any: ...
    async def bounded(self, coro: Any, timeout: float, what: str) -> Any: ...


async def save_state(machine: MigratingMachine, path: Path, timeout: float = 120.0) -> int:
    """Pause ``machine`` and write its state to ``path``; its size in bytes.

    The machine stays paused (run state ``postmigrate``): ``cont`` resumes it.

    :raise MigrationError: QEMU reported the migration failed.
    :raise VMTimeout: it did not complete within ``timeout`` seconds.
    """
    await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
    await machine.aqmp("stop")
    # One pass over a paused guest: no dirty pages to chase, the file is written once.
    await machine.aqmp("migrate", uri=f"exec:cat > {shlex.quote(str(path))}")
    await _completed(machine, timeout, f"the state of {machine.name} written to {path}")
    return (await asyncio.to_thread(path.stat)).st_size


async def load_state(machine: MigratingMachine, path: Path, timeout: float = 120.0) -> None:
    """Load the state in ``path`` into ``machine`` (started with ``incoming=True``) and run.

    :raise MigrationError: the file does not exist or QEMU refused the state.
    :raise VMTimeout: loading did not complete within ``timeout`` seconds.
    """
    if not await asyncio.to_thread(path.is_file):
        raise MigrationError(f"no saved state at {path}")
    # No self-announce: after a load QEMU sends RARPs from every NIC for switches to
    # learn where the guest moved. This QEMU's networks are new (a LAN's segment carries
    # only what its scenario sends, docs/networks.md).
    await machine.aqmp("migrate-set-parameters", **{"announce-rounds": 0})
    await machine.aqmp("migrate-incoming", uri=f"exec:cat {shlex.quote(str(path))}")
    await _completed(machine, timeout, f"{machine.name} to load the state in {path}")
    # The state was saved paused, so the loaded machine is paused too.
    await machine.aqmp("cont")


async def _completed(machine: MigratingMachine, timeout: float, what: str) -> None:
    async def poll() -> None:
        while True:
            info = await machine.aqmp("query-migrate")
            status = info.get("status") if isinstance(info, dict) else None
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                detail = info.get("error-desc", status) if isinstance(info, dict) else status
                raise MigrationError(f"{what}: migration {status}: {detail}")
            await asyncio.sleep(POLL_SECONDS)

    await machine.bounded(poll(), timeout, what)
