"""Per-session limits that keep a slow or hostile client from exhausting the agent.

- :data:`MAX_CALLS_IN_FLIGHT` tool calls run at once per session. One more waits
  up to :data:`CALL_ADMISSION_WAIT` seconds for a free slot, and the session reads
  nothing else from its client meanwhile (so waiting calls cannot pile up in
  memory); when no slot frees up in time it is refused with ``success=false``
  naming the limit.
- :class:`OutputBudget`: tools that produce big results (file chunks) reserve
  their size before reading; the reservation is held until the result has been
  handed to the transport, so a client that does not read stops further big reads
  instead of filling the agent's memory.
- :func:`send_deadline`: every message must be taken by the client within
  :data:`SEND_TIMEOUT` seconds plus its size at :data:`MIN_SEND_RATE`; a client
  that does not is dropped (its calls are cancelled). This also bounds how long a
  keepalive ping or a ``pong`` can wait behind a blocked send.
"""

from __future__ import annotations

import asyncio

MAX_CALLS_IN_FLIGHT = 64
"""Tool calls one session may have running at once."""
CALL_ADMISSION_WAIT = 10.0
"""Seconds a call over :data:`MAX_CALLS_IN_FLIGHT` waits for a free slot before refusal."""
# While a call waits for a slot the session stops reading from its client: further
# messages stay in the transport's buffers (the kernel's, for TCP), and once those are
# full the client's own sends block. That is the backpressure.
MAX_PENDING_OUTPUT = 256 * 1024 * 1024
"""Bytes of big results (file chunks) one session may have produced but not yet sent."""
# Why reserve before reading rather than count what is queued: a chunk read into memory
# is already spent, so the check must come before the read. A pull reserves twice its
# chunk (bytes + base64 text): at the default 1 MiB chunk all 64 calls in flight fit
# (128 MiB); bigger chunks wait for room instead of adding up.
SEND_TIMEOUT = 30.0
"""Seconds a client has to take one message (plus its size at :data:`MIN_SEND_RATE`)."""
MIN_SEND_RATE = 1024 * 1024
"""Bytes per second a client must at least read while taking a big message."""
# Why a deadline that grows with the size: a big result to a slow client is honest and
# takes long; a client that stopped reading is not, and holds the session's send lock
# (every other answer, pongs included, waits behind it). The fixed 30 s covers ordinary
# messages on a slow link; the rate part only matters for big ones.


def send_deadline(size: int, base: float = SEND_TIMEOUT) -> float:
    """Seconds allowed to send one message of ``size`` bytes."""
    return base + size / MIN_SEND_RATE


class OutputBudget:
    """Bytes a session may hold in results not yet sent; waiters queue for room.

    A single request larger than the whole budget is granted when nothing else is
    held, so an oversized result waits for the others instead of waiting forever.

    >>> async def demo() -> int:
    ...     budget = OutputBudget(10)
    ...     await budget.acquire(8, timeout=1)
    ...     budget.release(8)
    ...     await budget.acquire(20, timeout=1)
    ...     return budget.used
    >>> asyncio.run(demo())
    20
    """

    def __init__(self, limit: int = MAX_PENDING_OUTPUT) -> None:
        self.limit = limit
        self.used = 0
        self._changed = asyncio.Event()

    def _fits(self, size: int) -> bool:
        # An empty budget takes anything: a result bigger than the limit would else wait
        # for room that can never be made.
        return self.used == 0 or self.used + size <= self.limit

    async def acquire(self, size: int, *, timeout: float) -> None:
        """Reserve ``size`` bytes, waiting up to ``timeout`` seconds for room.

        :raise TimeoutError: no room within ``timeout`` (the client is not reading).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._fits(size):
            # No await between the check above and the wait below, so a release cannot
            # slip in unseen. Every waiter wakes on a release and checks again: no order
            # is promised, and each wait is bounded by its own deadline.
            self._changed.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"{self.used} bytes of results are waiting for the client to read them "
                    f"(limit {self.limit}); gave up after {timeout:g} s"
                )
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
                continue  # one last check: room may have come at the deadline
        self.used += size

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes."""
        self.used = max(0, self.used - size)
        self._changed.set()
