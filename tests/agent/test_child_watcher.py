"""Child processes are reaped through pidfds on the agent's loop, and still on others."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adare_guest import child_watcher
from adare_guest.child_watcher import watch_children_with_pidfd

pytestmark = pytest.mark.skipif(
    not child_watcher.NEEDED, reason="this Python already watches children with pidfds"
)


async def _exit_codes(count: int) -> list[int]:
    procs = [
        await asyncio.create_subprocess_exec("/bin/sh", "-c", f"exit {n}") for n in range(count)
    ]
    return [await asyncio.wait_for(proc.wait(), 30) for proc in procs]


def test_the_agent_loop_reaps_its_children_through_pidfds() -> None:
    async def scenario() -> list[int]:
        watch_children_with_pidfd()
        watch_children_with_pidfd()  # idempotent
        assert isinstance(asyncio.get_child_watcher(), child_watcher._LoopPidfdWatcher)
        return await _exit_codes(12)

    assert asyncio.run(scenario()) == list(range(12))


def test_a_new_loop_gets_its_own_watcher_after_the_old_one_closed() -> None:
    async def scenario() -> tuple[object, list[int]]:
        watch_children_with_pidfd()
        return asyncio.get_child_watcher(), await _exit_codes(3)

    first, codes_1 = asyncio.run(scenario())
    second, codes_2 = asyncio.run(scenario())
    assert first is not second and codes_1 == codes_2 == [0, 1, 2]


def test_a_loop_in_another_thread_still_gets_its_exit_codes() -> None:
    outcome: list[list[int]] = []

    async def agent_loop() -> None:
        watch_children_with_pidfd()
        worker = threading.Thread(target=lambda: outcome.append(asyncio.run(_exit_codes(4))))
        worker.start()
        await asyncio.to_thread(worker.join, 60)
        assert await _exit_codes(2) == [0, 1]

    asyncio.run(agent_loop())
    assert outcome == [[0, 1, 2, 3]]
