"""The host's disk side of a binary pull: chunks written and hashed by one thread, in order.

:func:`pytest_adare.agent.transfer.pull_file` hands each DATA payload to a
:class:`PullWriter` and goes back to the connection for the next message at once: the
thread writes and hashes chunk N while the loop takes chunk N+1 (before, the loop waited
for each write, one thread hand-off per chunk in series). ``stored(end)`` runs on the
loop once the bytes up to ``end`` are written: that is where the pull acknowledges them,
so what is queued here stays within the agent's window.

    writer = PullWriter(out, stored=on_stored, failed=on_failure)
    writer.put(payload, end)
    await writer.finish()   # every chunk written; writer.digest is the file's sha256
"""

from __future__ import annotations

import asyncio
import hashlib
import queue
import threading
from collections.abc import Callable
from typing import IO, Any


class PullWriter:
    """Writes chunks to ``out`` and hashes them in a thread of its own, in order."""

    def __init__(
        self,
        out: IO[bytes],
        *,
        stored: Callable[[int], None],
        failed: Callable[[Exception], None],
    ) -> None:
        self.digest: Any = hashlib.sha256()
        self.failure: Exception | None = None
        self._out = out
        self._stored = stored
        self._failed = failed
        self._loop = asyncio.get_running_loop()
        self._queue: queue.SimpleQueue[tuple[bytes, int] | None] = queue.SimpleQueue()
        self._pending = 0
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="adare-pull-writer", daemon=True)
        self._thread.start()

    def put(self, data: bytes, end: int) -> None:
        """Queue ``data``; ``stored(end)`` runs on the loop once it is written."""
        self._pending += 1
        self._idle.clear()
        self._queue.put((data, end))

    async def finish(self) -> None:
        """Wait until every queued chunk is written (and acknowledged to the caller).

        :raise Exception: a write failed (the failure it raised).
        """
        await self._idle.wait()
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        """Stop the thread once the chunk it writes (if any) is written; idempotent.
        Chunks still queued are dropped, and no ``stored``/``failed`` runs after this."""
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None and not self._closed:
            data, end = item
            try:
                self._out.write(data)
                self.digest.update(data)
            except Exception as exc:  # reported on the loop; nothing more is written
                self._loop.call_soon_threadsafe(self._on_failed, exc)
                return
            self._loop.call_soon_threadsafe(self._on_stored, end)

    def _on_stored(self, end: int) -> None:
        self._pending -= 1
        if self.failure is None and not self._closed:
            self._stored(end)
        if self._pending == 0:
            self._idle.set()

    def _on_failed(self, exc: Exception) -> None:
        self.failure = exc
        self._idle.set()
        if not self._closed:
            self._failed(exc)
