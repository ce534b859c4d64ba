"""``adare_guest/worker_pool.py``: a worker thread stuck on a hostile guest path (a FIFO
nobody writes to) is abandoned; neither later work nor the agent's exit waits for it."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ANSWER_BOUND = 10.0
"""Seconds within which the agent must have moved on from a stuck thread."""
REPO = Path(__file__).resolve().parents[2]


STUCK_THREAD_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from adare_guest.config import AgentConfig
    from adare_guest.tools.base import AgentState, CallContext

    fifo = sys.argv[1]
    os.mkfifo(fifo)

    async def main():
        ctx = CallContext(call_id="c", tool="t", timeout=1, config=AgentConfig(),
                          state=AgentState())
        # open() of a FIFO nobody writes to blocks for ever: a stuck worker thread.
        task = asyncio.ensure_future(ctx.run_in_thread(lambda: open(fifo, "rb")))
        await asyncio.sleep(0.5)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        print("cancelled", flush=True)

    asyncio.run(main())
    """
)


def test_a_worker_thread_stuck_for_good_does_not_keep_the_agent_from_exiting(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK_THREAD_SCRIPT, str(tmp_path / "fifo")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=ANSWER_BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"process with a stuck worker thread did not exit within {ANSWER_BOUND} s")
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "cancelled"


@pytest.mark.asyncio
async def test_a_stuck_worker_thread_is_abandoned_and_later_work_still_runs() -> None:
    from adare_guest.worker_pool import WorkerPool

    pool = WorkerPool(max_workers=1)
    loop = asyncio.get_running_loop()
    blocker = SimpleNamespace(done=False)

    def stuck() -> None:
        while not blocker.done:
            time.sleep(0.01)

    started = asyncio.Event()
    ended = asyncio.Event()

    workers: list[threading.Thread] = []

    def stuck_then_flag() -> None:
        workers.append(threading.current_thread())
        loop.call_soon_threadsafe(started.set)
        stuck()
        loop.call_soon_threadsafe(ended.set)

    task = asyncio.ensure_future(pool.run(stuck_then_flag))
    # A job counts as abandoned only once a thread runs it: cancel after it started.
    await asyncio.wait_for(started.wait(), ANSWER_BOUND)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert pool.abandoned == 1
    assert await asyncio.wait_for(pool.run(lambda: 42), ANSWER_BOUND) == 42
    blocker.done = True
    await asyncio.wait_for(ended.wait(), ANSWER_BOUND)
    # The abandoned thread counts itself out after its function returns, then ends.
    await loop.run_in_executor(None, workers[0].join, ANSWER_BOUND)
    assert not workers[0].is_alive()
    assert pool.abandoned == 0
