"""The guest's serial console as the host sees it: a log file, a ring of lines, waiters.

:class:`ConsoleCapture` is an :class:`asyncio.Protocol` fed with QEMU's stdout (the
console chardev). Every byte goes to ``console.log``; complete lines (and the partial
line still being written, e.g. a ``login:`` prompt) are kept in a bounded ring for
error messages and matched against the regexes that waiters registered.
"""

from __future__ import annotations

import asyncio
import codecs
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


@dataclass
class _Waiter:
    pattern: re.Pattern[str]
    since: int
    future: asyncio.Future[re.Match[str]]


class ConsoleCapture(asyncio.Protocol):
    """Capture of one console stream; lives on the event loop that reads the pipe."""

    def __init__(self, log_path: Path, ring_lines: int = 2000) -> None:
        self._log: BinaryIO = log_path.open("ab")
        # (offset of the line's first character in the whole stream, text without "\n")
        self._lines: deque[tuple[int, str]] = deque(maxlen=ring_lines)
        self._completed = 0  # characters in completed lines, newlines included
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._waiters: list[_Waiter] = []
        self.closed = asyncio.Event()

    # -- asyncio.Protocol -------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._log.write(data)
        self._log.flush()
        parts = (self._partial + self._decoder.decode(data).replace("\r", "")).split("\n")
        self._partial = parts.pop()
        for line in parts:
            self._lines.append((self._completed, line))
            self._completed += len(line) + 1
        self._wake_waiters(min(len(parts), len(self._lines)))

    def connection_lost(self, exc: Exception | None) -> None:
        self._log.close()
        self.closed.set()

    # -- queries ----------------------------------------------------------
    def mark(self) -> int:
        """The current position: pass it as ``since`` to match only later output."""
        return self._completed + len(self._partial)

    def tail(self, n: int = 40) -> list[str]:
        """The last ``n`` console lines (the partial line last, when there is one)."""
        lines = [text for _, text in self._lines]
        if self._partial:
            lines.append(self._partial)
        return lines[-n:] if n > 0 else []

    def wait_for(
        self, pattern: str | re.Pattern[str], since: int = 0
    ) -> asyncio.Future[re.Match[str]]:
        """A future resolved with the first match in output from position ``since`` on.

        Lines are matched one at a time (the line still being written counts too);
        a line that began before ``since`` is matched from ``since`` on. Lines still
        in the ring count, so by default output from before the call matches. The
        caller bounds the wait (and cancels the future when it gives up).
        """
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        future: asyncio.Future[re.Match[str]] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(regex, since, future)
        match = self._search(waiter, list(self._lines))
        if match is not None:
            future.set_result(match)
        else:
            self._waiters.append(waiter)
            future.add_done_callback(lambda _: self._forget(waiter))
        return future

    # -- internals --------------------------------------------------------
    def _search(self, waiter: _Waiter, lines: list[tuple[int, str]]) -> re.Match[str] | None:
        for start, text in [*lines, (self._completed, self._partial)]:
            if start + len(text) < waiter.since:
                continue
            match = waiter.pattern.search(text[max(0, waiter.since - start) :])
            if match is not None:
                return match
        return None

    def _wake_waiters(self, new_lines: int) -> None:
        fresh = list(self._lines)[-new_lines:] if new_lines else []
        for waiter in list(self._waiters):
            if not waiter.future.done():
                match = self._search(waiter, fresh)
                if match is not None:
                    waiter.future.set_result(match)

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
