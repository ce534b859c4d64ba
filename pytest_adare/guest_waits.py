"""The facade's waits: poll a check until it holds, and say what was seen when it never does.

Every wait of :class:`~pytest_adare.guest.AsyncGuest` (``wait_until_succeeds``,
``wait_for_file``, ``wait_for_port``, ``wait_for_unit``, ``wait_for_window``) is one
:func:`poll_until` over one agent call. The gap between checks is :data:`POLL_INTERVAL`
(100 ms: a check is itself an agent round trip, so a faster poll would only load the
guest), never the NixOS driver's one second; each check gets the time that is left as
its own budget, so a hanging check cannot outlive the wait. Timeouts raise
:class:`~pytest_adare.errors.GuestWaitTimeout` with what was waited for and what the
last check saw.

The parsers below read guest output, which is not trusted: bounded, and anything that
does not parse is left out rather than believed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_adare.errors import GuestWaitTimeout, ToolError

T = TypeVar("T")

POLL_INTERVAL = 0.1
"""Seconds between two checks of a wait."""
DEFAULT_WAIT = 60.0
"""The waits' default timeout: a service under TCG takes seconds, not minutes."""
MIN_CHECK_BUDGET = 1.0
"""A check near the deadline still gets this long to answer."""
MAX_WINDOWS = 1000
"""Window lists longer than this (from the guest) are cut."""

LISTENING_TCP_COMMAND = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"
"""The guest's TCP sockets from the kernel itself: needs no ``ss``, ``netstat`` or ``nc``."""
_TCP_LISTEN = "0A"


async def poll_until(
    check: Callable[[float], Awaitable[T]],
    done: Callable[[T], bool],
    timeout: float,
    what: str,
    describe: Callable[[T], str],
    *,
    interval: float = POLL_INTERVAL,
) -> T:
    """Run ``check(budget)`` until ``done(result)``; return that result.

    ``budget`` is the time left (at least :data:`MIN_CHECK_BUDGET`), for the check to
    bound itself. ``done`` may raise to end the wait early (a unit that failed).

    :raise GuestWaitTimeout: after ``timeout`` seconds, with ``describe(last result)``,
        or when a check was still running at the end (a ``ToolError`` of the agent's
        ``timed_out`` command).
    :raise ValueError: ``timeout`` is not a positive number.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        try:
            result = await check(max(deadline - time.monotonic(), MIN_CHECK_BUDGET))
        except ToolError as error:
            # A check still running when the wait's time was up (the agent ended it).
            if not (error.result or {}).get("timed_out"):
                raise
            raise GuestWaitTimeout(what, timeout, attempts, str(error)) from None
        if done(result):
            return result
        if time.monotonic() + interval >= deadline:
            raise GuestWaitTimeout(what, timeout, attempts, describe(result))
        await asyncio.sleep(interval)


def listening_tcp_ports(proc_net_tcp: str) -> set[int]:
    """The local ports of the listening sockets in ``/proc/net/tcp``/``tcp6`` text.

    >>> listening_tcp_ports("  sl  local_address rem_address   st\\n"
    ...                     "   0: 00000000:4A5D 00000000:0000 0A 00000000:00000000\\n"
    ...                     "   1: 0100007F:0016 0100007F:9C40 01 00000000:00000000\\n")
    {19037}
    """
    ports: set[int] = set()
    for line in proc_net_tcp.splitlines()[:100_000]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _TCP_LISTEN or ":" not in fields[1]:
            continue
        try:
            port = int(fields[1].rsplit(":", 1)[1], 16)
        except ValueError:
            continue
        if 0 < port < 65536:
            ports.add(port)
    return ports


def check_port(port: int) -> int:
    """:raise ValueError: ``port`` is not a TCP port number."""
    if type(port) is not int or not 0 < port < 65536:
        raise ValueError(f"port must be an int in 1..65535, got {port!r}")
    return port


HOST_SIDE_SETTLE = 0.5
"""Seconds a host-side connection must stay open to count as answered: QEMU's user-mode
NIC accepts on the host at once and closes again when the guest refuses."""


async def host_tcp_answer(address: tuple[str, int], budget: float) -> str:
    """Why a TCP connection to ``address`` (a forward on this host) got no answer, or
    ``""`` when it was accepted and stayed open (or sent data) for :data:`HOST_SIDE_SETTLE`."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), budget)
    except (OSError, asyncio.TimeoutError) as error:
        return f"connecting to {address[0]}:{address[1]} failed ({error or type(error).__name__})"
    try:
        data = await asyncio.wait_for(reader.read(1), HOST_SIDE_SETTLE)
    except asyncio.TimeoutError:
        return ""  # open and silent: a server waiting for its client to speak
    except OSError as error:
        return f"{address[0]}:{address[1]} reset the connection ({error})"
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return "" if data else f"{address[0]}:{address[1]} closed the connection at once"


def output_tail(text: str, limit: int = 500) -> str:
    """The end of a command's output for an error message."""
    text = text.strip()
    return repr(text if len(text) <= limit else "..." + text[-limit:])


@dataclass(frozen=True)
class Window:
    """A visible window on the guest's desktop: its title and geometry (screen pixels)."""

    title: str
    x: int
    y: int
    width: int
    height: int
    id: int

    @property
    def center(self) -> tuple[int, int]:
        """The middle of the window, e.g. to click on."""
        return self.x + self.width // 2, self.y + self.height // 2


def windows_from_result(result: dict[str, Any]) -> list[Window]:
    """The windows of a ``list_windows`` result; entries of the wrong shape are left out."""
    raw = result.get("windows")
    if not isinstance(raw, list):
        return []
    return list(_windows(raw[:MAX_WINDOWS]))


def _windows(entries: Iterable[Any]) -> Iterable[Window]:
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("title"), str):
            continue
        numbers = [entry.get(key) for key in ("x", "y", "width", "height", "id")]
        if all(type(n) is int for n in numbers):
            x, y, width, height, window_id = (int(n) for n in numbers if n is not None)
            yield Window(entry["title"][:1000], x, y, width, height, window_id)


__all__ = [
    "DEFAULT_WAIT",
    "POLL_INTERVAL",
    "Window",
    "check_port",
    "host_tcp_answer",
    "listening_tcp_ports",
    "poll_until",
    "windows_from_result",
]
