"""The guest's file systems quiesced for a consistent copy: qemu-ga's freeze, else a flush.

Backend-neutral: it speaks to qemu-ga (any transport) and to the caller's ``flush``,
never to the hypervisor; the machine's :meth:`paused` does the hypervisor's part.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pytest_adare.errors import QGAError
from pytest_adare.machine.results import Flush, FreezeAgent

FREEZE_TIMEOUT = 60.0


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
