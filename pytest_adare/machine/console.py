"""The guest's serial console as the host sees it: a log file, a ring of lines, waiters.

:class:`ConsoleCapture` is an :class:`asyncio.Protocol` fed with QEMU's stdout (the
console chardev). Bytes go to ``console.log`` (up to :data:`MAX_LOG_BYTES`); complete
lines (and the partial line still being written, e.g. a ``login:`` prompt) are kept in a
bounded ring for error messages and matched against the regexes that waiters registered.

The guest is hostile, so every cost is bounded by what is new: each read is decoded and
split once (only its own bytes are scanned for newlines), a line is cut after
:data:`MAX_LINE_CHARS` characters (the rest is counted and marked ``…[cut N
characters]``), and waiters search only the lines completed by this read and the
(bounded) line being written. 11 MiB without a newline in 4 KiB reads costs linear time,
not the quadratic re-splitting of an ever-growing line.

The first lines that say what killed the guest (a kernel panic, an oops, a ``BUG:``, an
OOM kill; :data:`FATAL_LINE`) are kept with a few lines around them however much output
follows, and :meth:`ConsoleCapture.tail` leads with them: a panic's headline never
scrolls out of an error message or a failure report behind its call trace.
"""

from __future__ import annotations

import asyncio
import codecs
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_LINE_CHARS = 4096
"""Characters kept of one console line (a kernel line is at most 1024); the rest is cut."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""Bytes of console output written to ``console.log``; later output only reaches the ring."""
RING_LINES = 2000
"""Console lines kept in memory (at most ``RING_LINES * MAX_LINE_CHARS`` characters)."""
FATAL_LINE = re.compile(
    r"Kernel panic - not syncing|\bOops: |\bBUG: |Out of memory: Kill|\boom-kill:"
)
"""A line that says what killed (or is killing) the guest kernel."""
FATAL_BEFORE, FATAL_AFTER = 2, 6
"""Lines kept before and after a fatal line."""
MAX_FATAL_EXCERPTS = 3
"""Fatal excerpts kept (the first ones: what came first is the cause)."""


@dataclass
class _Waiter:
    pattern: re.Pattern[str]
    since: int
    future: asyncio.Future[re.Match[str]]


@dataclass
class _Excerpt:
    """A fatal line with the lines around it, as they were completed."""

    line_number: int
    headline: str
    lines: list[str]
    missing_after: int = FATAL_AFTER


class ConsoleCapture(asyncio.Protocol):
    """Capture of one console stream; lives on the event loop that reads the pipe."""

    def __init__(
        self,
        log_path: Path,
        ring_lines: int = RING_LINES,
        *,
        max_line_chars: int = MAX_LINE_CHARS,
        max_log_bytes: int = MAX_LOG_BYTES,
    ) -> None:
        self._log: BinaryIO = log_path.open("ab")
        self._max_line = max_line_chars
        self._log.seek(0, 2)  # a restarted machine appends: the bound is the file's
        self._log_room = max(0, max_log_bytes - self._log.tell())
        self._log_dropped = 0
        # (offset of the line's first character in the whole stream, text without "\n")
        self._lines: deque[tuple[int, str]] = deque(maxlen=ring_lines)
        self._line_count = 0
        self._completed = 0  # characters in completed lines, newlines included
        self._partial = ""  # the kept part of the line being written
        self._partial_cut = 0  # characters of that line beyond max_line_chars
        # Incremental: a read may end inside a multi-byte character, whose rest comes next.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._waiters: list[_Waiter] = []
        self._excerpts: list[_Excerpt] = []
        self.closed = asyncio.Event()

    # -- asyncio.Protocol -------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._write_log(data)
        # The serial console ends lines with CRLF; a lone CR (a progress bar) is dropped too.
        pieces = self._decoder.decode(data).replace("\r", "").split("\n")
        # The first piece continues the line being written; each later one starts a line.
        partial_changed = self._extend_partial(pieces[0])
        for piece in pieces[1:]:
            self._complete_line()
            partial_changed = self._extend_partial(piece)
        # One read can complete more lines than the ring holds: only the kept ones are new.
        self._wake_waiters(min(len(pieces) - 1, len(self._lines)), partial_changed)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._log.closed:  # the machine may report the end after the pipe did
            if self._log_dropped:
                self._log.write(
                    f"\n[console.log stops at {self._log.tell()} bytes (the host's bound); "
                    f"{self._log_dropped} more bytes were not written]\n".encode()
                )
            self._log.close()
        self.closed.set()

    # -- queries ----------------------------------------------------------
    def mark(self) -> int:
        """The current position: pass it as ``since`` to match only later output."""
        return self._completed + len(self._partial) + self._partial_cut

    def tail(self, n: int = 40) -> list[str]:
        """The last ``n`` console lines (the partial line last, when there is one).

        When the console showed what killed the guest (:meth:`fatal_lines`), those lines
        come first, under a heading, wherever they are in the output, and a second
        heading introduces the last ``n`` lines; ``n=0`` gives only those.
        """
        lines = [text for _, text in self._lines]
        if self._partial or self._partial_cut:
            lines.append(self._shown_partial())
        last = lines[-n:] if n > 0 else []
        fatal = self.fatal_lines()
        if not fatal or n <= 0:
            return fatal or last
        return [*fatal, f"== the last {len(last)} console lines:", *last]

    def fatal_lines(self) -> list[str]:
        """What killed the guest, as the console said it: each fatal line (a kernel
        panic, an oops, a ``BUG:``, an OOM kill) with a few lines around it, under a
        heading naming its line number in the console output; empty when there was none.
        """
        shown: list[str] = []
        for excerpt in self._excerpts:
            shown.append(
                f"== what killed the guest, from console line {excerpt.line_number}: "
                f"{excerpt.headline}"
            )
            shown.extend(excerpt.lines)
        return shown

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
        # No race between this search and registering: both run on the loop thread, the
        # only one that calls data_received.
        match = self._search(waiter, list(self._lines), partial=True)
        if match is not None:
            future.set_result(match)
        else:
            self._waiters.append(waiter)
            # A caller that gives up cancels the future: the waiter must not stay behind.
            future.add_done_callback(lambda _: self._forget(waiter))
        return future

    # -- internals --------------------------------------------------------
    def _write_log(self, data: bytes) -> None:
        kept = data[: self._log_room]
        if kept:
            self._log.write(kept)
            self._log.flush()
            self._log_room -= len(kept)
        self._log_dropped += len(data) - len(kept)

    def _extend_partial(self, piece: str) -> bool:
        """Add ``piece`` to the line being written, cut at the line limit; True if the
        kept text changed (a cut line's kept text does not, so it is not searched again)."""
        if not piece:
            return False
        room = self._max_line - len(self._partial)
        if room > 0:
            self._partial += piece[:room]
        self._partial_cut += max(0, len(piece) - max(room, 0))
        return room > 0

    def _shown_partial(self) -> str:
        if self._partial_cut:
            return f"{self._partial}…[cut {self._partial_cut} characters]"
        return self._partial

    def _complete_line(self) -> None:
        text = self._shown_partial()
        self._lines.append((self._completed, text))
        self._completed += len(self._partial) + self._partial_cut + 1
        self._partial, self._partial_cut = "", 0
        self._line_count += 1
        self._note_fatal(text)

    def _note_fatal(self, text: str) -> None:
        # Called once per completed line, so the whole output is looked at, not the ring.
        for excerpt in self._excerpts:
            if excerpt.missing_after:
                # Context of an earlier fatal line: a panic inside an oops' trace is its
                # consequence, not a new cause.
                excerpt.lines.append(text)
                excerpt.missing_after -= 1
                return
        if (
            len(self._excerpts) < MAX_FATAL_EXCERPTS
            and "---[ end " not in text  # the closing line of a trace already kept
            and (match := FATAL_LINE.search(text)) is not None
        ):
            before = [line for _, line in list(self._lines)[-FATAL_BEFORE - 1 : -1]]
            headline = text[match.start() :][:200]
            self._excerpts.append(_Excerpt(self._line_count, headline, [*before, text]))

    def _search(
        self, waiter: _Waiter, lines: list[tuple[int, str]], *, partial: bool
    ) -> re.Match[str] | None:
        candidates = [*lines, (self._completed, self._partial)] if partial else lines
        for start, text in candidates:
            if start + len(text) < waiter.since:
                continue
            # Offsets count the whole stream, so a line begun before the waiter's mark is
            # searched from the mark on: output from before it cannot satisfy the wait.
            match = waiter.pattern.search(text[max(0, waiter.since - start) :])
            if match is not None:
                return match
        return None

    def _wake_waiters(self, new_lines: int, partial_changed: bool) -> None:
        if not self._waiters or (not new_lines and not partial_changed):
            return
        fresh = [self._lines[i] for i in range(len(self._lines) - new_lines, len(self._lines))]
        for waiter in list(self._waiters):
            if not waiter.future.done():
                match = self._search(waiter, fresh, partial=partial_changed)
                if match is not None:
                    waiter.future.set_result(match)

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
