"""The transport-independent half of an agent client: calls, results and events.

Both host clients (:class:`pytest_adare.agent.websocket_client.AgentClient` over WebSocket and
:class:`pytest_adare.agent.serial_client.SerialAgentClient` over the DV serial link) derive
from :class:`CallRouter`. It keeps pending calls keyed by id, turns ``tool_result``
messages into results or :class:`ToolError`, answers the agent's pings (one pong in
flight at most), hands events to subscribers from a task of their own (a slow
subscriber never delays a result; what waits for them is bounded in bytes) and,
when the transport reports it is gone, fails every pending call at once. A transport
only implements :meth:`CallRouter._transmit` (send one message's JSON text), feeds
each received message to :meth:`CallRouter._receive` and calls
:meth:`CallRouter._fail_all` / :meth:`CallRouter._stop_events` as it goes down.

The guest is hostile, so what it sends is judged message by message:

* a message above ``max_message_bytes`` (default :data:`DEFAULT_MAX_MESSAGE_BYTES`),
  one that is not JSON, nests too deep, is not an object or has an unknown type and
  no id of a pending call: :class:`ProtocolViolation` **for the connection**. The
  transport closes it and every pending call fails at once with that cause; nothing
  of the stream after such a message can be trusted to belong to anyone.
* a message whose envelope is broken but whose ``id`` names a pending call (a
  ``tool_result`` with a field of the wrong type): only **that call** fails with
  :class:`ProtocolViolation`; the connection and the other calls go on.
* a ``tool_result`` for an id nobody waits for (a late answer, or a lie) is dropped:
  the call it should have answered ends by its own timeout (:class:`VMTimeout`).

Whatever else goes wrong in a transport's reader (any exception) ends the connection
the same way: the first cause wins, :attr:`CallRouter.closed` turns true and no call
waits out its timeout on a reader that is gone.

A call does not wait out its timeout on an agent that went silent either. While it
waits and nothing at all arrives from the agent for :data:`PING_AFTER` seconds, the
host pings (the agent's message loop answers, also while a tool runs in a thread); an
agent that answers nothing for :data:`UNRESPONSIVE_AFTER` seconds is stuck, or the
link lost the message, and the call fails with :class:`AgentUnresponsive`, unless the
``stall_check`` the VM installed says to go on waiting (a paused guest). A busy agent
pongs, so a long call still gets its whole timeout. Either way the error carries what
``stall_check`` learned about the agent (its health over a side path, its log tail).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from adare_guest import __version__
from adare_guest.binary_transfer import (
    TERMINAL_KINDS,
    TransferFrame,
    TransferFrameError,
    parse_transfer_frame,
)
from adare_guest.identity import PROTOCOL_VERSION
from adare_guest.protocol import (
    MAX_HOST_MESSAGE,
    Connect,
    Event,
    Ping,
    Pong,
    ProtocolError,
    ToolCall,
    ToolResult,
    encode_message,
    new_id,
    parse_message,
)
from pytest_adare.agent.connection import EventCallback
from pytest_adare.agent.transfer_stream import TransferStream, TransferStreams
from pytest_adare.errors import (
    AgentDisconnected,
    AgentUnresponsive,
    ProtocolViolation,
    ToolError,
    VMTimeout,
)

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT = 300.0
"""Host-side bound on a call when neither the caller nor the tool's params give one."""
TIMEOUT_GRACE = 30.0
"""Added to a tool's own ``timeout`` param: the agent enforces that one and answers."""
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Host-side bound on one guest→host message (``max_message_bytes`` of both clients).

Room for an ``execute_shell`` result at the agent's default output caps (16 MiB of
stdout and of stderr) even in the worst JSON escaping (6 bytes per control byte)."""
CLIENT_INFO = {"name": "pytest-adare", "version": __version__, "protocol_version": PROTOCOL_VERSION}
PING_AFTER = 10.0
"""Seconds a waiting call hears nothing from the agent before the host pings it (and
again as long as the silence lasts)."""
UNRESPONSIVE_AFTER = 60.0
"""Seconds of silence (no result, event, pong) after which a waiting call gives up: the
agent's loop answers a ping in milliseconds, in seconds under heavy TCG load."""
HOST_LATE = 10.0
"""Seconds a timed-out wait may overrun before the error says the host's loop was late
(blocked by something else in the pytest process: then the agent may have answered)."""
STALL_CHECK_TIMEOUT = 30.0
"""Bound on asking the VM what the silent agent was doing."""


@dataclass(frozen=True)
class Stall:
    """What a VM's ``stall_check`` found about an agent that went silent."""

    stuck: bool
    """False: keep waiting (e.g. the guest is paused, so of course it is silent)."""
    report: list[str]
    """Lines for the error: the agent's health over a side path, its log tail..."""
    console_tail: list[str] = field(default_factory=list)


StallCheck = Callable[[str, float], Awaitable[Stall]]
"""``check(tool, silent_seconds)``; installed by the VM as :attr:`CallRouter.stall_check`."""


def call_timeout(params: dict[str, Any]) -> float:
    """The host-side bound for a call with ``params``: their ``timeout`` plus a grace."""
    own = params.get("timeout")
    return float(own) + TIMEOUT_GRACE if isinstance(own, (int, float)) else DEFAULT_CALL_TIMEOUT


class CallRouter(ABC):
    """Routes calls and events over one transport; subclasses only move message text.

    ``disconnect_type`` is the exception pending calls fail with when the transport goes
    down; ``None`` means "the same type as the failure" (a protocol violation then fails
    them with :class:`ProtocolViolation`).
    """

    def __init__(
        self,
        peer: str,
        *,
        disconnect_type: type[Exception] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        if max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be at least 1024, got {max_message_bytes}")
        self.peer = peer
        self.max_message_bytes = max_message_bytes
        """The largest guest→host message accepted; a bigger one ends the connection."""
        self._disconnect_type = disconnect_type
        self._pending: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._subscribers: list[EventCallback] = []
        # Events wait here for the dispatcher, each with its size: a guest that sends
        # large events faster than subscribers take them is bounded in bytes, not count.
        self._events: asyncio.Queue[tuple[Event, int] | None] = asyncio.Queue()
        self._queued_event_bytes = 0
        self._connect_reply: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._welcome: dict[str, Any] = {}
        self._failure: Exception | None = None
        # At most one pong in flight: a guest that floods pings and stops reading would
        # otherwise pile up one blocked send (task and message) per ping, without bound.
        # Pings that arrive meanwhile are answered once, with the newest id.
        self._pong_due: str | None = None
        self._ponger: asyncio.Task[None] | None = None
        self._streams = TransferStreams(peer)
        # Terminal streams (pytest_adare.agent.terminal): each id's messages go to its sink;
        # None tells a sink the connection is gone.
        self._terminals: dict[int, Callable[[TransferFrame | None], None]] = {}
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"agent-events {peer}")
        self._last_heard = time.monotonic()
        self._liveness_ping: asyncio.Task[None] | None = None
        self.ping_after = PING_AFTER
        """Seconds of silence before a waiting call pings the agent."""
        self.unresponsive_after = UNRESPONSIVE_AFTER
        """Seconds of silence after which a waiting call fails (see the module docstring)."""
        self.stall_check: StallCheck | None = None
        """Asked what a silent agent is doing before a call fails (the VM installs one)."""

    @abstractmethod
    async def _transmit(self, text: str) -> None:
        """Send one protocol message's JSON text; raise :class:`AgentDisconnected` if gone."""

    @abstractmethod
    async def _transmit_binary(self, data: bytes) -> None:
        """Send one binary transfer message; raise :class:`AgentDisconnected` if gone."""

    # -- the AgentConnection interface ------------------------------------------------

    @property
    def server_info(self) -> dict[str, Any]:
        """The agent's ``connect`` answer (version, bundle_hash, tools...) over its welcome."""
        reply = self._connect_reply.result() if self._connect_reply.done() else {}
        return {**self._welcome, **reply}

    @property
    def closed(self) -> bool:
        """True once the connection is gone (closed by us, by the agent, or dropped)."""
        return self._failure is not None

    async def call(
        self, tool: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Call ``tool`` with ``params`` and return its ``result`` dict.

        ``timeout`` (seconds) bounds the wait on the host; by default it is the tool's own
        ``timeout`` param plus a grace period, else :data:`DEFAULT_CALL_TIMEOUT`.

        :raise ToolError: the agent answered ``success=false``.
        :raise AgentDisconnected: the connection dropped first.
        :raise VMTimeout: no answer in time.
        :raise ValueError: the message is above the 16 MiB host→guest limit.
        """
        params = dict(params or {})
        if timeout is None:
            timeout = call_timeout(params)
        message = ToolCall(tool=tool, params=params, id=new_id(), timestamp=time.time())
        text = encode_message(message)
        size = len(text.encode())
        if size > MAX_HOST_MESSAGE:
            raise ValueError(
                f"tool call {tool!r} is {size / 2**20:.1f} MiB, above the "
                f"{MAX_HOST_MESSAGE // 2**20} MiB host→guest message limit; send smaller chunks"
            )
        self._check_open(f"call {tool!r}")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = (tool, future)
        try:
            await self._transmit(text)
            return await self._answer(tool, future, timeout)
        finally:
            self._pending.pop(message.id, None)

    async def _answer(
        self, tool: str, future: asyncio.Future[dict[str, Any]], timeout: float
    ) -> dict[str, Any]:
        """The call's result; pings the agent while it is silent (module docstring).

        :raise VMTimeout: no answer within ``timeout``.
        :raise AgentUnresponsive: nothing at all from the agent for ``unresponsive_after``.
        """
        started = time.monotonic()
        deadline = started + timeout
        give_up = self.unresponsive_after
        while not future.done():
            now = time.monotonic()
            silent = now - max(self._last_heard, started)
            what = f"the agent's answer to {tool!r} from {self.peer}"
            if now >= deadline:
                found = await self._ask_stall_check(tool, silent) or Stall(True, [])
                late = [
                    f"the host's event loop ran late: this wait took {now - started:.0f} s"
                ] if now - started > timeout + HOST_LATE else []  # fmt: skip
                raise VMTimeout(what, timeout, found.console_tail, late + found.report)
            if silent >= give_up:
                stall = await self._ask_stall_check(tool, silent)
                if future.done():  # it answered while we asked
                    break
                if stall is None or stall.stuck:
                    stall = stall or Stall(True, [])
                    raise AgentUnresponsive(
                        f"{what} was awaited", silent, stall.console_tail, stall.report
                    )
                give_up = silent + self.unresponsive_after  # e.g. paused: ask again later
            if silent >= self.ping_after:
                self._ping_for_liveness()
            await asyncio.wait({future}, timeout=min(deadline - now, self.ping_after / 2))
        return future.result()

    async def _ask_stall_check(self, tool: str, silent: float) -> Stall | None:
        if self.stall_check is None:
            return None
        try:
            return await asyncio.wait_for(self.stall_check(tool, silent), STALL_CHECK_TIMEOUT)
        except Exception as exc:  # the report is a courtesy: the call's own error wins
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return Stall(True, [f"(what the agent was doing is unknown: {why})"])

    def _ping_for_liveness(self) -> None:
        """One ping at a time; any message back (its pong, a result, an event) counts."""
        if self._liveness_ping is not None and not self._liveness_ping.done():
            return
        ping = encode_message(Ping(id=new_id(), timestamp=time.time()))

        async def send() -> None:
            with contextlib.suppress(AgentDisconnected, ProtocolViolation):
                await self._transmit(ping)

        self._liveness_ping = asyncio.create_task(send(), name=f"agent-liveness {self.peer}")

    # -- binary transfers (pytest_adare.agent.connection.BinaryTransport) ---------------

    def open_stream(self, *, window: int, max_payload: int) -> TransferStream:
        """Register a new transfer id; the agent's messages for it go to the stream."""
        self._check_open("open a transfer")
        stream = self._streams.open(window=window, max_payload=max_payload)
        if self._failure is not None:
            stream.fail(self._failure)
        return stream

    def close_stream(self, stream: TransferStream) -> None:
        """Forget a transfer (late messages for its id are dropped for a while)."""
        self._streams.close(stream)

    async def send_binary(self, data: bytes) -> None:
        """Send one binary transfer message.

        :raise AgentDisconnected: the connection is gone.
        """
        self._check_open("send a transfer message")
        await self._transmit_binary(data)

    def attach_terminal(
        self, terminal_id: int, sink: Callable[[TransferFrame | None], None]
    ) -> None:
        """Route the agent's messages for terminal ``terminal_id`` to ``sink``.

        :raise AgentDisconnected: the connection is gone.
        """
        self._check_open("open a terminal")
        self._terminals[terminal_id] = sink

    def detach_terminal(self, terminal_id: int) -> None:
        """Forget a terminal (its late messages are dropped)."""
        self._terminals.pop(terminal_id, None)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every agent event; returns the unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    # -- for the transports -------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._failure is not None:
            raise AgentDisconnected(f"cannot {what}: {self._failure}")

    async def _exchange_connect(self, client_info: dict[str, Any], timeout: float) -> None:
        """Send our ``connect`` and wait for the agent's answer.

        :raise asyncio.TimeoutError: no answer within ``timeout`` seconds.
        """
        hello = Connect(client_info=dict(client_info), id=new_id(), timestamp=time.time())
        await self._transmit(encode_message(hello))
        try:
            await asyncio.wait_for(asyncio.shield(self._connect_reply), timeout)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(
                f"no answer to our connect message from {self.peer} within {timeout:.1f} s"
            ) from None

    def too_large(self, size: int) -> ProtocolViolation:
        """The error for a guest message of ``size`` bytes above ``max_message_bytes``."""
        return ProtocolViolation(
            f"the agent at {self.peer} sent a message of {size} bytes, above "
            f"max_message_bytes={self.max_message_bytes} (the host's bound on one message "
            "from the guest; raise it on the client if such answers are expected)"
        )

    def _receive(self, data: str | bytes) -> None:
        """Route one whole message as received (JSON text).

        A broken message that names a pending call by its id fails only that call.

        :raise ProtocolViolation: the message ends the connection (see the module
            docstring): too large, not JSON, too deep, not a protocol message.
        """
        self.note_heard()
        if len(data) > self.max_message_bytes:  # bytes, or characters (each at least one byte)
            size = len(data) if isinstance(data, bytes) else len(data.encode(errors="replace"))
            raise self.too_large(size)
        try:
            message = parse_message(data)
        except ProtocolError as exc:
            violation = ProtocolViolation(
                f"the agent at {self.peer} sent an invalid message ({exc}): {data[:200]!r}"
            )
            if exc.message_id is not None and exc.message_id in self._pending:
                tool, future = self._pending.pop(exc.message_id)
                if not future.done():
                    future.set_exception(ProtocolViolation(f"{tool!r}: {violation}"))
                return
            raise violation from exc
        except Exception as exc:  # the parser must never kill the reader (the guest is hostile)
            raise ProtocolViolation(
                f"the agent at {self.peer} sent a message the host cannot parse "
                f"({type(exc).__name__}: {exc}): {data[:200]!r}"
            ) from exc
        if isinstance(message, ToolResult):
            self._resolve(message)
        elif isinstance(message, Event):
            server_info = message.data.get("server_info")
            if isinstance(server_info, dict) and not self._welcome:
                self._welcome = dict(server_info)
            self._queue_event(message, len(data))
        elif isinstance(message, Connect):
            if not self._connect_reply.done():
                self._connect_reply.set_result(dict(message.client_info))
        elif isinstance(message, Ping):
            self._pong_due = message.id
            if self._ponger is None or self._ponger.done():
                self._ponger = asyncio.create_task(
                    self._answer_pings(), name=f"agent-pong {self.peer}"
                )

    def _receive_binary(self, data: bytes) -> None:
        """Route one binary transfer message to its stream.

        :raise ProtocolViolation: not a transfer message, or for a transfer the host never
            opened (the connection ends, as for an invalid JSON message).
        """
        self.note_heard()
        try:
            frame = parse_transfer_frame(data)
        except TransferFrameError as exc:
            raise ProtocolViolation(
                f"the agent at {self.peer} sent an invalid binary message ({exc}): {data[:40]!r}"
            ) from exc
        if frame.kind in TERMINAL_KINDS:
            sink = self._terminals.get(frame.transfer_id)
            if sink is not None:  # else a message that crossed our close: dropped
                sink(frame)
            return
        self._streams.deliver(frame)

    def note_heard(self) -> None:
        """The agent sent something (a whole message, or a transport's part of one: a big
        answer that takes minutes to arrive is no silence)."""
        self._last_heard = time.monotonic()

    def _fail_all(self, failure: Exception) -> None:
        """Mark the connection gone (the first cause wins); fail every pending call."""
        # Called from several places as a connection dies (reader end, send error,
        # close()); only the first cause is the real one, later calls would report
        # symptoms. The pending map is swapped out before failing the futures so a
        # callback that issues a new call cannot see (or be failed with) the old ones.
        # The error type is the transport's "disconnected" class when it set one, so
        # callers can tell a dropped link from a protocol violation.
        if self._failure is None:
            self._failure = failure
        if self._liveness_ping is not None:
            self._liveness_ping.cancel()
        error_type = self._disconnect_type or type(self._failure)
        self._streams.fail_all(error_type(f"transfer got no further data: {self._failure}"))
        terminals, self._terminals = self._terminals, {}
        for sink in terminals.values():
            sink(None)
        pending, self._pending = self._pending, {}
        for tool, future in pending.values():
            if not future.done():
                future.set_exception(error_type(f"{tool!r} got no answer: {self._failure}"))
        if not self._connect_reply.done():
            self._connect_reply.set_exception(error_type(str(self._failure)))
            self._connect_reply.exception()  # retrieved here; connect() re-raises via shield

    async def _stop_events(self) -> None:
        """Let the event dispatcher finish what is queued, then stop it (bounded: 5 s)."""
        self._events.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await asyncio.wait_for(self._dispatcher, 5.0)

    # -- internals ----------------------------------------------------------------------

    def _resolve(self, message: ToolResult) -> None:
        entry = self._pending.pop(message.id, None)
        if entry is None:  # the caller timed out or was cancelled meanwhile
            return
        tool, future = entry
        if future.done():
            return
        if message.success:
            future.set_result(dict(message.result or {}))
        else:
            future.set_exception(ToolError(tool, message.error or "call failed", message.result))

    async def _answer_pings(self) -> None:
        """Pong the newest ping until none is due (one send at a time)."""
        while (ping_id := self._pong_due) is not None:
            self._pong_due = None
            pong = encode_message(Pong(id=ping_id, timestamp=time.time()))
            with contextlib.suppress(AgentDisconnected, ProtocolViolation):
                await self._transmit(pong)

    def _queue_event(self, event: Event, size: int) -> None:
        if self._queued_event_bytes + size > self.max_message_bytes:
            raise ProtocolViolation(
                f"the agent at {self.peer} sent events faster than they were handled: "
                f"{self._queued_event_bytes + size} bytes of them waiting, above "
                f"max_message_bytes={self.max_message_bytes} (the host's bound on what "
                "the guest's messages may hold in memory at once)"
            )
        self._queued_event_bytes += size
        self._events.put_nowait((event, size))

    async def _dispatch_loop(self) -> None:
        while (queued := await self._events.get()) is not None:
            event, size = queued
            for callback in list(self._subscribers):
                try:
                    outcome = callback(event)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    log.exception("event subscriber %r failed on %s", callback, event.event_type)
            self._queued_event_bytes -= size  # held until every subscriber had it
            del queued, event  # not kept while waiting for the next one
