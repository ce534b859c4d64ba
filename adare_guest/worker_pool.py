"""A bounded pool of daemon worker threads that a cancelled call can abandon.

Blocking syscalls on guest paths can hang for good (a FIFO without a writer, a
dead network filesystem): malware in the guest can arrange that on purpose. The
default asyncio executor cannot cope: its threads are joined at interpreter exit,
so one stuck thread keeps the agent from stopping on SIGTERM, and a few stuck
threads starve every later call. This pool differs in three ways:

- its threads are daemon threads, never joined: the process exits whatever they do;
- a call whose awaiting task is cancelled (client gone, timeout) *abandons* its
  thread: the thread no longer counts towards ``max_workers`` and ends when (if
  ever) its function returns, so stuck threads do not starve later calls;
- abandoned threads are themselves capped (``max_abandoned``): past that, new work
  is refused with :class:`PoolExhausted` instead of piling up threads.

>>> pool = WorkerPool(max_workers=4)
>>> asyncio.run(pool.run(sum, [1, 2, 3]))
6
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_MAX_WORKERS = 16
"""Threads running calls at once (more work waits in the queue)."""
DEFAULT_MAX_ABANDONED = 64
"""Threads abandoned by cancelled calls that may still be stuck before work is refused."""
IDLE_SECONDS = 30.0
"""An idle worker thread ends after this long."""


class PoolExhausted(RuntimeError):
    """Too many worker threads are stuck in calls that were given up."""


@dataclass
class _Job:
    func: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    abandoned: bool = False


class WorkerPool:
    """Run blocking functions on daemon threads; see the module docstring."""

    def __init__(
        self,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_abandoned: int = DEFAULT_MAX_ABANDONED,
        name: str = "adare-worker",
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.max_abandoned = max_abandoned
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0  # live threads that still count (not abandoned)
        self._idle = 0
        self._abandoned = 0  # abandoned threads still running their function
        self._queued = 0  # jobs put but not yet taken by a thread
        self._serial = 0

    @property
    def abandoned(self) -> int:
        """Threads abandoned by cancelled calls that have not returned yet."""
        return self._abandoned

    @property
    def busy(self) -> int:
        """Threads running a call that still counts (not idle, not abandoned)."""
        with self._lock:
            return self._workers - self._idle

    @property
    def queued(self) -> int:
        """Calls waiting for a thread."""
        return self._queued

    async def run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``func(*args, **kwargs)`` on a worker thread; cancelling the await abandons it.

        :raise PoolExhausted: :attr:`max_abandoned` threads are stuck already.
        """
        if self._abandoned >= self.max_abandoned:
            raise PoolExhausted(
                f"{self._abandoned} worker threads are stuck in abandoned calls "
                f"(limit {self.max_abandoned}); restart the agent"
            )
        loop = asyncio.get_running_loop()
        job = _Job(func, args, kwargs, loop.create_future(), loop)
        with self._lock:
            self._queued += 1
        self._jobs.put(job)
        self._spawn_if_needed()
        try:
            return await job.future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            self._abandon(job)
            raise

    def _abandon(self, job: _Job) -> None:
        with job.lock:
            job.abandoned = True
            running = job.started
        if running:
            with self._lock:
                self._workers -= 1
                self._abandoned += 1
            self._spawn_if_needed()  # the queue must not wait for the stuck thread

    def _spawn_if_needed(self) -> None:
        with self._lock:
            # An idle thread may already be on its way to an earlier job: compare counts.
            if self._queued <= self._idle or self._workers >= self.max_workers:
                return
            self._workers += 1
            self._serial += 1
            serial = self._serial
        thread = threading.Thread(target=self._work, name=f"{self._name}-{serial}", daemon=True)
        thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    # A job queued while we timed out saw us idle and spawned nobody.
                    if self._queued == 0:
                        self._workers -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            with job.lock:
                if job.abandoned:
                    continue  # cancelled while queued: never started
                job.started = True
            try:
                outcome: tuple[bool, Any] = (True, job.func(*job.args, **job.kwargs))
            except BaseException as exc:  # delivered to the awaiting task, not lost
                outcome = (False, exc)
            with job.lock:
                abandoned = job.abandoned
            if abandoned:
                with self._lock:
                    self._abandoned -= 1
                return  # this thread was replaced while it was stuck
            _deliver(job, outcome)


def _deliver(job: _Job, outcome: tuple[bool, Any]) -> None:
    def settle() -> None:
        if job.future.done():
            return
        ok, value = outcome
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

    try:
        job.loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # the loop is closed: nobody waits for this result any more


_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> WorkerPool:
    """The agent's pool for blocking work on guest paths (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerPool()
        return _shared
