"""The shared loop thread: results, timeouts, and the coroutine's own errors."""

from __future__ import annotations

import asyncio

import pytest

from pytest_adare.loop_thread import LoopThread


@pytest.fixture(scope="module")
def loop_thread() -> LoopThread:
    return LoopThread(name="test-loop")


def test_run_returns_the_coroutine_result(loop_thread: LoopThread) -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert loop_thread.run(answer()) == 42


def test_a_wait_that_runs_out_is_cancelled_and_says_so(loop_thread: LoopThread) -> None:
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError, match=r"did not finish within 0\.2 s"):
        loop_thread.run(forever(), timeout=0.2)

    async def was_cancelled() -> bool:
        await asyncio.wait_for(cancelled.wait(), 5)
        return cancelled.is_set()

    assert loop_thread.run(was_cancelled())


def test_the_coroutines_own_timeout_error_passes_through_unchanged(
    loop_thread: LoopThread,
) -> None:
    class ImageNotFoundLike(TimeoutError):
        pass

    async def gives_up() -> None:
        raise ImageNotFoundLike("template not on screen; last screenshot at /tmp/x.png")

    with pytest.raises(ImageNotFoundLike, match="last screenshot"):
        loop_thread.run(gives_up())


def test_running_on_the_loop_thread_itself_is_refused(loop_thread: LoopThread) -> None:
    async def nested() -> str:
        async def inner() -> None:
            return None

        try:
            loop_thread.run(inner())
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    assert "await instead" in loop_thread.run(nested())
