"""One asyncio event loop in a daemon thread: the host's async core, used synchronously.

Every async object of the host (QMP client, agent clients, QGA) lives on this loop;
sync APIs call :meth:`LoopThread.run` instead of keeping a second implementation,
and :func:`sync_twin` makes each such method from its async twin.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

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


A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)
P = ParamSpec("P")
R = TypeVar("R")


class SyncTwin(Generic[A_co]):
    """Base of a synchronous class whose ``aio`` attribute is its async twin.

    Covariant: a twin of a class is a twin of each of its bases too, so a twin made
    from a method a base defines (``sync_twin(AsyncGuest.shell)``, ``shell`` from one
    of the facade's sections) is a method of the subclass's twin.
    """

    aio: A_co


def sync_twin(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncTwin[A], P], R]:
    """The one way to make a sync method: run ``method`` of ``self.aio`` on the shared loop.

    The twin has exactly the async method's parameters, for ``mypy --strict`` and for
    :func:`inspect.signature` (through ``__wrapped__``)::

        class Guest(SyncTwin[AsyncGuest]):
            shell = sync_twin(AsyncGuest.shell)

    The method is looked up on ``self.aio`` by name, so a twin made from a base's
    method (an abstract one included) runs the subclass's override.
    """
    name = method.__name__

    def run(twin: SyncTwin[A], /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, Coroutine[Any, Any, R]] = getattr(twin.aio, name)
        return shared_loop().run(bound(*args, **kwargs))

    run.__name__ = method.__name__
    run.__qualname__ = method.__qualname__
    run.__doc__ = method.__doc__
    run.__wrapped__ = method  # type: ignore[attr-defined]
    return run


def sync_context_twin(
    method: Callable[Concatenate[A, P], AbstractAsyncContextManager[R]],
) -> Callable[Concatenate[SyncTwin[A], P], AbstractContextManager[R]]:
    """:func:`sync_twin` for a method returning an async context manager.

    Entering and leaving the sync context enter and leave the async one on the
    shared loop, so the body of a ``with`` runs in the caller's thread. The method is
    looked up on ``self.aio`` by name, as :func:`sync_twin` does.
    """

    name = method.__name__

    @contextlib.contextmanager
    def run(twin: SyncTwin[A], /, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        opened: Callable[P, AbstractAsyncContextManager[R]] = getattr(twin.aio, name)
        manager = opened(*args, **kwargs)
        loop = shared_loop()
        value = loop.run(manager.__aenter__())
        try:
            yield value
        except BaseException as exc:
            if not loop.run(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            loop.run(manager.__aexit__(None, None, None))

    run.__name__ = method.__name__
    run.__qualname__ = method.__qualname__
    run.__doc__ = method.__doc__
    run.__wrapped__ = method  # type: ignore[attr-defined]
    return run
