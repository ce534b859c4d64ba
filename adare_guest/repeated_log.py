"""Log lines that a flood can repeat thousands of times a second, at a bounded rate.

A hostile client (or a process out of file descriptors) can make the agent hit the
same error for every connection attempt; written out each time, the log would fill
the guest's disk. :class:`RepeatedLog` writes the first occurrence of each kind at
once and then at most one line per ``interval`` seconds for it, counting what it
left out:

>>> import logging, sys
>>> clock = iter([0.0, 1.0, 2.0, 11.0]).__next__
>>> log = logging.getLogger("demo")
>>> log.addHandler(logging.StreamHandler(sys.stdout)); log.propagate = False
>>> repeated = RepeatedLog(log, interval=10.0, clock=clock)
>>> for _ in range(4):
...     repeated.warning("accept", "cannot accept: %s", "EMFILE")
cannot accept: EMFILE
cannot accept: EMFILE (2 more in the last 11 s)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REPEATED_LOG_INTERVAL = 10.0
"""Seconds between two lines of one kind of repeated message."""


class RepeatedLog:
    """Rate-limits log lines by kind (a short key naming what went wrong)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = REPEATED_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def info(self, kind: str, message: str, *args: object) -> None:
        """Log ``message % args`` at INFO, unless ``kind`` was logged less than
        ``interval`` seconds ago (then it is only counted)."""
        self._log(logging.INFO, kind, message, args)

    def warning(self, kind: str, message: str, *args: object) -> None:
        """As :meth:`info`, at WARNING."""
        self._log(logging.WARNING, kind, message, args)

    def _log(self, level: int, kind: str, message: str, args: tuple[object, ...]) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        left_out = self._left_out.pop(kind, 0)
        self._last[kind] = now
        if left_out and last is not None:
            message += f" ({left_out} more in the last {now - last:.0f} s)"
        self.logger.log(level, message, *args)
