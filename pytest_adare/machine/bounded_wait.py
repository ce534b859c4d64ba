"""The one rule every wait on a VM follows: it ends at once when the machine dies.

Both machine backends (:class:`~pytest_adare.qemu.machine.Machine` and the libvirt
backend's machine) wait through :func:`bounded_wait`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pytest_adare.errors import VMDied, VMTimeout

T = TypeVar("T")


async def bounded_wait(
    coro: Awaitable[T],
    timeout: float,
    what: str,
    *,
    died: asyncio.Event,
    death_reason: Callable[[], str | None],
    console_tail: Callable[[], list[str]],
) -> T:
    """Await ``coro`` for at most ``timeout`` s, ending at once when ``died`` is set.

    :raise VMDied: ``died`` was set first (``death_reason()`` and the console tail).
    :raise VMTimeout: ``timeout`` passed; the message names ``what`` was awaited.
    """
    task = asyncio.ensure_future(coro)
    death = asyncio.ensure_future(died.wait())
    try:
        done, _ = await asyncio.wait(
            {task, death}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    except BaseException:  # the caller was cancelled: its work must not outlive it
        task.cancel()
        raise
    finally:
        death.cancel()
    if task in done:
        return task.result()
    # Stop the work and wait until it has stopped. asyncio.wait() never raises the
    # task's own outcome (retrieved below so asyncio does not log it), while a
    # cancellation of the caller still propagates: nothing else is swallowed.
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()
    if death in done:
        raise VMDied(f"{death_reason()} while waiting for {what}", console_tail())
    raise VMTimeout(what, timeout, console_tail())
