"""A log file handler that writes a call's INFO line after the reply has gone out.

The agent writes one INFO line per tool call (``done ID TOOL success=... in ... s``). As
a plain ``FileHandler`` that line is formatted and written (a ``write`` system call)
before the reply is sent: measured on localhost, a tenth of a millisecond of every round
trip, 15-20 % of a ``get_timestamp``. This handler keeps records below WARNING until the
event loop's next turn, which comes after the reply's ``transport.write``: the same lines,
in the same order, off the path the host waits on.

What makes it safe as failure evidence (the host reads the log's tail through the agent's
own shell, or through qemu-ga when the agent is stuck):

- a record at WARNING or above writes everything pending, then itself, at once;
- pending records are written at the loop's next turn, so a tail read through a tool
  call (another turn) sees every earlier line;
- outside a running loop (start-up, shutdown, a thread), records are written at once;
- at most :data:`MAX_PENDING` records wait; :meth:`close` writes what is left.
"""

from __future__ import annotations

import asyncio
import logging
import time

MAX_PENDING = 256
"""Records held at most; the next one writes them all."""


class AgentFormatter(logging.Formatter):
    """``logging.Formatter`` whose ``asctime`` is ``strftime``'d once a second, not once
    a record (the same text: ``2026-12-04 18:20:35,009``; 7 of a line's ~20 us)."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
        return (self.default_msec_format or "%s,%03d") % (self._stamp, record.msecs)


class DeferredFileHandler(logging.FileHandler):
    """``FileHandler`` whose records below WARNING wait for the event loop's next turn."""

    def __init__(self, filename: str, encoding: str | None = "utf-8") -> None:
        super().__init__(filename, encoding=encoding)
        self._pending: list[logging.LogRecord] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.write_pending()
            super().emit(record)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: nothing would come back for it
            self.write_pending()
            super().emit(record)
            return
        self._pending.append(record)
        if len(self._pending) >= MAX_PENDING:
            self.write_pending()
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.write_pending)

    def write_pending(self) -> None:
        """Write the records held so far, in order (one flush for all)."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return
        self.acquire()
        try:
            if self.stream is None:  # closed, or opened lazily: as FileHandler.emit does
                self.stream = self._open()
            for record in pending:
                try:
                    self.stream.write(self.format(record) + self.terminator)
                except Exception:  # logging's own contract: a handler never raises
                    self.handleError(record)
            self.flush()
        finally:
            self.release()

    def close(self) -> None:
        self.write_pending()
        super().close()
