"""What the agent is doing, for the health report its serial link answers without the
event loop: whether the loop still runs, and which calls are running since when.

A host whose call got no answer asks this over the serial link (the device thread
answers pings itself), so it can tell an agent busy in a long call (the loop beats,
the call is listed) from one whose loop is stuck (the beat is late) from a lost
message (the loop beats, no call is running).

>>> describe_calls([("run_test", 291.4), ("execute_shell", 2.6)])
'run_test 291s, execute_shell 3s'
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterable

BEAT_INTERVAL = 1.0
"""Seconds between two beats of the event loop."""
MAX_LISTED_CALLS = 6
"""Calls named in the health report (the oldest first); more are counted."""
LOOP_BLOCKED = 5.0
"""Seconds late for its beat past which the loop counts as blocked (and the report says
where it is)."""
STACK_FRAMES = 4
"""Innermost frames of a blocked loop's thread named in the health report."""


class LoopHeartbeat:
    """A task that notes the time every :data:`BEAT_INTERVAL` seconds; another thread
    reads how late the next beat is (the loop is blocked that long)."""

    def __init__(self, interval: float = BEAT_INTERVAL) -> None:
        self.interval = interval
        self._last: float | None = None
        self._thread: tuple[int, int] | None = None  # the loop thread's ident, native id

    async def run(self) -> None:
        """Beat until cancelled."""
        self._thread = (threading.get_ident(), threading.get_native_id())
        while True:
            self._last = time.monotonic()
            await asyncio.sleep(self.interval)

    def late_by(self) -> float | None:
        """Seconds the loop is late for its next beat (0.0 when on time), None before the
        first beat. Safe from any thread (one float is read)."""
        last = self._last
        if last is None:
            return None
        return max(0.0, time.monotonic() - last - self.interval)

    def loop_stack(self) -> str:
        """Where the loop's thread is now: its innermost Python frames (``file:line
        function``, innermost first) and, on Linux, what the kernel says it waits in
        (``/proc`` wchan and run state: ``futex_wait_queue S`` is a lock, ``D`` is I/O)."""
        if self._thread is None:
            return ""
        ident, native = self._thread
        frame = sys._current_frames().get(ident)
        frames: list[str] = []
        while frame is not None and len(frames) < STACK_FRAMES:
            code = frame.f_code
            frames.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}")
            frame = frame.f_back
        return " < ".join(frames) + _kernel_wait(native)


def describe_calls(calls: Iterable[tuple[str, float]]) -> str:
    """``(tool, seconds running)`` pairs as one short line, the oldest first."""
    ordered = sorted(calls, key=lambda call: -call[1])
    named = [f"{tool} {seconds:.0f}s" for tool, seconds in ordered[:MAX_LISTED_CALLS]]
    more = len(ordered) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _kernel_wait(native_id: int) -> str:
    task = f"/proc/self/task/{native_id}"
    try:
        with open(f"{task}/wchan") as wchan, open(f"{task}/stat") as stat:
            waits_in = wchan.read().strip() or "-"
            # stat: "tid (comm) S ...": comm may hold spaces, the state follows its ")".
            state = stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""
    return f" [kernel: {waits_in} {state}]"
