"""The host's WebSocket client for the guest agent (DESIGN §3 and §5).

One connection, calls multiplexed by id::

    client = await AgentClient.connect("127.0.0.1", port, token)
    result = await client.call("execute_shell", {"shell_command": "uname -a"})
    await client.close()

"Connected" means a full WebSocket handshake *and* an answer to our ``connect``
message: QEMU's user-mode forwarding accepts the host's TCP connection even when
nothing listens in the guest, so an open socket proves nothing. Calls, results and
events are routed by :class:`~pytest_adare.agent.call_router.CallRouter`; this module only
moves WebSocket frames: text for JSON messages, binary for file transfer messages
(:mod:`pytest_adare.agent.transfer`). When the connection drops, every pending call fails at
once with :class:`AgentDisconnected`; when the agent sends something the host refuses
(a message above ``max_message_bytes``, an invalid message or binary frame, see
:mod:`~pytest_adare.agent.call_router`) or the reader fails in any way, the connection
closes and every pending call fails at once with :class:`ProtocolViolation`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.frames import CloseCode

from pytest_adare.agent.call_router import (
    CLIENT_INFO,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_MAX_MESSAGE_BYTES,
    TIMEOUT_GRACE,
    CallRouter,
)
from pytest_adare.errors import AgentDisconnected, AgentUnreachable, ProtocolViolation

__all__ = [
    "CLIENT_INFO",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_WRITE_BUFFER",
    "TIMEOUT_GRACE",
    "AgentClient",
    "describe_error",
]


MAX_WRITE_BUFFER = 32 * 1024 * 1024
"""Bytes the host may have queued to send to one agent; above it the connection drops.

The peer is answered by the ``websockets`` protocol itself (a pong for every ping
frame, with no backpressure), so a guest that floods pings and never reads would
otherwise grow the host's memory for as long as it goes on. Twice the largest
host→guest message (16 MiB), so an honest large call never trips it."""
WRITE_LIMIT = 64 * 1024
"""``write_limit`` of the connection: a send waits while more than this is queued."""
RECEIVE_QUEUE = 1
"""``max_queue`` of the connection: whole frames waiting for the reader before the
socket is no longer read. Each may be up to ``max_message_bytes``, so it is one."""
CLOSE_TIMEOUT = 2.0
"""Seconds the closing handshake may take before the connection is cut: a peer that
stopped reading (or whose unread frames fill the receive queue) never finishes it."""


class _BoundedConnection(ClientConnection):
    """A client connection that drops a peer which makes it queue too much to send."""

    write_overflow: int | None = None
    """The queued bytes that made the connection drop, once it did."""
    heard: Callable[[], None] | None = None
    """Told of every byte from the agent (part of a message counts: no silence)."""

    def data_received(self, data: bytes) -> None:
        if self.heard is not None:
            self.heard()
        super().data_received(data)  # may queue automatic pongs and close frames
        queued = self.transport.get_write_buffer_size()
        if queued > MAX_WRITE_BUFFER and self.write_overflow is None:
            self.write_overflow = queued
            self.transport.abort()


def describe_error(exc: BaseException) -> str:
    """One line naming an exception, even when its text is empty."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AgentClient(CallRouter):
    """A live WebSocket connection to the agent; create it with :meth:`connect`."""

    def __init__(
        self,
        websocket: ClientConnection,
        peer: str,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        super().__init__(peer, max_message_bytes=max_message_bytes)
        self._ws = websocket
        if isinstance(websocket, _BoundedConnection):
            websocket.heard = self.note_heard
        self._reader = asyncio.create_task(self._read_loop(), name=f"agent-reader {peer}")

    # -- connecting -----------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        token: str | None,
        *,
        attempts: int = 6,
        backoff: float = 0.25,
        attempt_timeout: float = 5.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> AgentClient:
        """Connect and complete the ``connect`` exchange, retrying with a short backoff.

        ``max_message_bytes`` bounds one message from the agent; a bigger one closes
        the connection with a :class:`ProtocolViolation` that names the limit.

        :raise AgentUnreachable: when every attempt failed (``details["attempts"]`` lists
            each error) or the agent rejected the token.
        """
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        failures: list[str] = []
        for attempt in range(attempts):
            try:
                return await cls._connect_once(
                    host, port, token, attempt_timeout, max_message_bytes
                )
            except InvalidStatus as exc:
                if exc.response.status_code in (401, 403):
                    raise AgentUnreachable(
                        f"the agent at ws://{host}:{port} rejected our token "
                        f"(HTTP {exc.response.status_code})",
                        {"attempts": [describe_error(exc)]},
                    ) from exc
                failures.append(describe_error(exc))
            except (
                OSError,
                InvalidHandshake,
                ConnectionClosed,
                asyncio.TimeoutError,
                AgentDisconnected,
                ProtocolViolation,
            ) as exc:
                failures.append(describe_error(exc))
            if attempt + 1 < attempts:
                await asyncio.sleep(min(backoff * 2**attempt, 2.0))
        raise AgentUnreachable(
            f"all {attempts} connection attempts to the agent at ws://{host}:{port} failed "
            f"(last: {failures[-1]})",
            {"attempts": failures, "host": host, "port": port},
        )

    @classmethod
    async def _connect_once(
        cls, host: str, port: int, token: str | None, timeout: float, max_message_bytes: int
    ) -> AgentClient:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        websocket = await ws_connect(
            f"ws://{host}:{port}",
            additional_headers=headers,
            max_size=max_message_bytes,  # a bigger frame or message: 1009, reported by name
            ping_interval=None,  # a paused VM (savevm) must not look like a dead peer
            compression=None,  # deflate of base64 chunks costs more than it saves
            open_timeout=timeout,
            max_queue=RECEIVE_QUEUE,
            close_timeout=CLOSE_TIMEOUT,
            write_limit=WRITE_LIMIT,
            create_connection=_BoundedConnection,
        )
        client = cls(websocket, f"{host}:{port}", max_message_bytes=max_message_bytes)
        try:
            await client._exchange_connect(CLIENT_INFO, timeout)
        except BaseException:
            await client.close()
            raise
        return client

    # -- closing --------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection; calls still pending fail with :class:`AgentDisconnected`."""
        self._fail_all(
            AgentDisconnected(f"connection to the agent at {self.peer} closed by the host")
        )
        await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._reader, 5.0)
        await self._stop_events()

    async def wait_closed(self) -> Exception:
        """Wait until the connection is gone and return why."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._reader)
        assert self._failure is not None
        return self._failure

    # -- the transport ----------------------------------------------------------------

    async def _transmit(self, text: str) -> None:
        await self._send(text)

    async def _transmit_binary(self, data: bytes) -> None:
        await self._send(data)

    async def _send(self, message: str | bytes) -> None:
        """A text frame for a str, a binary frame for bytes (what websockets does)."""
        try:
            await self._ws.send(message)
        except ConnectionClosed as exc:
            raise AgentDisconnected(
                f"connection to the agent at {self.peer} closed: {describe_error(exc)}"
            ) from exc

    async def _read_loop(self) -> None:
        # Whatever ends this loop, pending calls fail at once and the client is closed:
        # a reader that dies silently would leave every call waiting out its timeout.
        failure: Exception = AgentDisconnected(f"reading from the agent at {self.peer} stopped")
        close_code: int | None = None
        try:
            async for frame in self._ws:
                if isinstance(frame, bytes):
                    self._receive_binary(frame)
                else:
                    self._receive(frame)
                del frame  # not kept while the next message is read (it may be as large)
            failure = AgentDisconnected(f"the agent at {self.peer} closed the connection")
        except ConnectionClosed as exc:
            failure = self._closed_failure(exc)
        except ProtocolViolation as exc:
            failure, close_code = exc, CloseCode.PROTOCOL_ERROR
        except Exception as exc:  # a bug or a hostile message we did not foresee
            failure = ProtocolViolation(
                f"reading from the agent at {self.peer} failed: {describe_error(exc)}"
            )
            failure.__cause__, close_code = exc, CloseCode.INTERNAL_ERROR
        finally:
            self._fail_all(failure)
            self._events.put_nowait(None)
        if close_code is not None:
            await self._ws.close(code=close_code, reason="protocol violation")

    def _closed_failure(self, exc: ConnectionClosed) -> Exception:
        """Why the connection closed: our size limits by name, else a plain drop."""
        overflow = getattr(self._ws, "write_overflow", None)
        if overflow is not None:
            return AgentDisconnected(
                f"the agent at {self.peer} does not read what the host sends: {overflow} "
                f"bytes queued for it (answers to its pings), above the host's bound of "
                f"{MAX_WRITE_BUFFER}; connection dropped"
            )
        if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
            return ProtocolViolation(
                f"the agent at {self.peer} sent a message above max_message_bytes="
                f"{self.max_message_bytes} (the host's bound on one message from the guest; "
                f"{exc.sent.reason}); connection closed"
            )
        return AgentDisconnected(
            f"connection to the agent at {self.peer} dropped: {describe_error(exc)}"
        )
