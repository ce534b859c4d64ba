"""One asyncio event loop in a daemon thread: the host's async core, used synchronously.

Every async object of the host (QMP client, agent clients, QGA) lives on this loop;
sync APIs call :meth:`LoopThread.run` instead of keeping a second implementation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in its own daemon thread."""

    def __init__(self, name: str = "adare-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from any other thread.

        :raise RuntimeError: when called from the loop thread itself (it would deadlock).
        :raise TimeoutError: when ``timeout`` passes first (the coroutine is cancelled).
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run() called from its own loop: await instead")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError (the same class since 3.11)
                raise
            future.cancel()
            raise TimeoutError(f"coroutine did not finish within {timeout} s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` without waiting."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process-wide loop thread (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread()
        return _shared
