"""One server-side WebSocket connection after the opening handshake (asyncio, stdlib only).

:class:`WebSocketConnection` sits on an asyncio transport whose protocol forwards
``data_received``, ``eof_received``, ``connection_lost``, ``pause_writing`` and
``resume_writing`` to it (:mod:`adare_guest.websocket.server` does). Its contract:

- :meth:`~WebSocketConnection.send`: ``str`` goes out as one text frame, ``bytes`` as
  one binary frame. It returns once the transport's write buffer is below
  ``write_limit``, so a client that does not read blocks its sender (bound the wait
  yourself: :mod:`adare_guest.backpressure` does). :class:`ConnectionClosed` once
  the server sent its close frame or the connection is lost.
- :meth:`~WebSocketConnection.recv` and ``async for``: messages in arrival order
  (a text message over ``max_text`` bytes as its UTF-8 ``bytes``, see
  :class:`~adare_guest.websocket.frames.FrameParser`).
  When ``max_queue`` messages or ``max_queue_bytes`` bytes wait unread, the socket is
  no longer read (TCP pushes back on the client) until a quarter of that is left
  (checked after each read from the socket: what that read completed is queued too).
  Once the client closed, broke the protocol (:mod:`adare_guest.websocket.frames`:
  the connection is closed with 1002, 1007 or 1009) or the connection was lost,
  the queued messages are still delivered, then ``recv`` raises
  :class:`ConnectionClosed` and ``async for`` ends.
- A client's ping is answered with a pong at once, unless the transport's write
  buffer is over ``write_limit``: then the pong waits, the socket is no longer read
  (pings included) until the buffer drains, and only the last ping read meanwhile is
  answered then (RFC 6455 §5.5.3 allows that). So at most one pong waits, whatever a
  client that sends pings and never reads does; a client that does not ping is still
  read while a big message drains (its pongs to the keepalive, its next calls). Every
  ``ping_interval`` seconds the server pings; no pong within ``ping_timeout`` closes
  with 1011 and drops the client.
- :meth:`~WebSocketConnection.close` sends a close frame and returns once the
  connection is gone: after the client's close frame the server closes TCP; a
  client that does not answer or does not read is cut off after ``close_timeout``.
  Messages arriving after the server's close frame are dropped. A client's close
  frame is answered with its own code.
- :meth:`~WebSocketConnection.abort` drops the connection at once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from typing import Any

from adare_guest.websocket.frames import (
    Close,
    CloseCode,
    DataMessage,
    FrameParser,
    Opcode,
    Ping,
    ProtocolViolation,
    close_payload,
    encode_frame,
    frame_header,
)

log = logging.getLogger("adare_guest.websocket")

WRITE_LIMIT = 32 * 1024
"""Bytes the transport may buffer before :meth:`WebSocketConnection.send` waits."""
MAX_QUEUE = 16
"""Messages received but not yet read before reading from the socket pauses."""
MAX_QUEUE_BYTES = 16 * 1024 * 1024
"""Bytes of messages received but not yet read before reading from the socket pauses."""


class ConnectionClosed(Exception):
    """The connection is closing or closed: nothing more can be sent or received.

    ``code`` and ``reason`` are the client's close frame (1006: there was none).
    """

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"connection closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


class WebSocketConnection:
    """The server side of one WebSocket connection; see the module docstring."""

    def __init__(
        self,
        transport: asyncio.Transport,
        *,
        max_size: int,
        max_text: int | None = None,
        ping_interval: float | None = 20.0,
        ping_timeout: float = 20.0,
        close_timeout: float = 10.0,
        write_limit: int = WRITE_LIMIT,
        max_queue: int = MAX_QUEUE,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
    ) -> None:
        self.transport = transport
        self.request: Any = None
        """The opening handshake's request (set by the server that accepted it)."""
        self.remote_address: Any = transport.get_extra_info("peername")
        self.local_address: Any = transport.get_extra_info("sockname")
        self.ping_timeout = ping_timeout
        self.close_timeout = close_timeout
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.close_code: int | None = None
        """The client's close code (1005: a close frame without one; 1006: no close
        frame before the connection ended); None while it is open."""
        self.close_reason = ""
        self.latency: float | None = None
        """Seconds the last answered ping took."""
        self.dropped_messages = 0
        """Messages that arrived after the server's close frame (not delivered)."""
        self._loop = asyncio.get_running_loop()
        self._parser = FrameParser(max_message=max_size, max_text=max_text)
        self._messages: collections.deque[str | bytes] = collections.deque()
        self._queued_bytes = 0
        self._recv_waiter: asyncio.Future[None] | None = None
        self._receiving = True
        self._queue_full = False  # reading paused for the queue, until its low water
        self._reading_paused = False  # for the queue or for a pong waiting
        self._pending_pong: bytes | None = None  # a ping's payload, until the buffer drains
        self._close_sent = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._pings: dict[bytes, tuple[asyncio.Future[float | None], float]] = {}
        self._lost: asyncio.Future[None] = self._loop.create_future()
        self._abort_timer: asyncio.TimerHandle | None = None
        transport.set_write_buffer_limits(high=write_limit)
        self._keepalive: asyncio.Task[None] | None = None
        if ping_interval is not None:
            self._keepalive = self._loop.create_task(self._keep_alive(ping_interval))

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (TCP closed or aborted)."""
        return self._lost.done()

    @property
    def queued_bytes(self) -> int:
        """Bytes of received messages not read yet."""
        return self._queued_bytes

    # ------------------------------------------------------------------ public API
    async def send(self, message: str | bytes) -> None:
        """Send one message; wait while the transport's write buffer is full.

        :raise ConnectionClosed: the connection is closing or closed.
        :raise TypeError: ``message`` is neither ``str`` nor ``bytes``.
        """
        if isinstance(message, str):
            opcode, payload = Opcode.TEXT, message.encode("utf-8")
        elif isinstance(message, (bytes, bytearray, memoryview)):
            opcode, payload = Opcode.BINARY, bytes(message)
        else:
            raise TypeError(f"cannot send {type(message).__name__}: only str or bytes")
        if self._close_sent or self.closed:
            raise self._closed_error()
        self.transport.write(frame_header(opcode, len(payload)))
        self.transport.write(payload)
        await self._drain()

    async def recv(self) -> str | bytes:
        """The next message.

        :raise ConnectionClosed: no message is queued and none can arrive any more.
        """
        while not self._messages:
            if not self._receiving:
                raise self._closed_error()
            if self._recv_waiter is not None:
                raise RuntimeError("recv() is already waiting for the next message")
            waiter = self._loop.create_future()
            self._recv_waiter = waiter
            try:
                await waiter
            finally:
                self._recv_waiter = None
        message = self._messages.popleft()
        self._queued_bytes -= len(message)
        if self._queue_full and self._below_low_water():
            self._queue_full = False
            self._update_reading()
        return message

    def __aiter__(self) -> WebSocketConnection:
        return self

    async def __anext__(self) -> str | bytes:
        try:
            return await self.recv()
        except ConnectionClosed:
            raise StopAsyncIteration from None

    async def ping(self, data: bytes | None = None) -> float:
        """Send a ping and return the seconds until its pong (a later pong counts too).

        :raise ConnectionClosed: the connection closed before the pong arrived.
        """
        if self._close_sent or self.closed:
            raise self._closed_error()
        payload = os.urandom(4) if data is None else data
        while payload in self._pings:
            payload = os.urandom(4)
        waiter: asyncio.Future[float | None] = self._loop.create_future()
        self._pings[payload] = (waiter, self._loop.time())
        self._write(encode_frame(Opcode.PING, payload))
        try:
            latency = await waiter
        finally:
            self._pings.pop(payload, None)
        if latency is None:
            raise self._closed_error()
        return latency

    async def close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Run the closing handshake (bounded by ``close_timeout``); return once closed."""
        self.start_close(code, reason)
        await self.wait_closed()

    def start_close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Send the close frame (once) and arm the cut-off; does not wait."""
        if self.closed:
            return
        if not self._close_sent:
            self._close_sent = True
            self._write(encode_frame(Opcode.CLOSE, close_payload(code, reason)))
            self._update_reading()  # the client's close frame must be read
        self._arm_abort()
        if not self._receiving:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (no closing handshake)."""
        if not self.closed:
            self.transport.abort()

    async def wait_closed(self) -> None:
        """Return once the connection is gone."""
        await asyncio.shield(self._lost)

    # ------------------------------------------------------------------ transport events
    def data_received(self, data: bytes) -> None:
        """Bytes from the client (the protocol's ``data_received``)."""
        if not self._receiving:
            return
        try:
            events = self._parser.feed(data)
        except ProtocolViolation as exc:
            log.info("client %s broke the protocol: %s", self.remote_address, exc)
            self._stop_receiving()
            self._fail(exc.code, exc.reason)
            return
        for event in events:
            if isinstance(event, DataMessage):
                self._queue(event.data)
            elif isinstance(event, Ping):
                self._answer_ping(event.payload)
            elif isinstance(event, Close):
                self._closed_by_client(event)
            else:
                self._pong(event.payload)
        if self._recv_waiter is not None and not self._recv_waiter.done():
            self._recv_waiter.set_result(None)

    def eof_received(self) -> None:
        """The client shut down its sending side (without a close frame, or after one)."""
        self._stop_receiving()
        self.transport.close()
        self._arm_abort()

    def connection_lost(self, exc: Exception | None) -> None:
        """The transport is closed: wake every waiter, stop the keepalive."""
        self._stop_receiving()
        if self.close_code is None:
            self.close_code = CloseCode.ABNORMAL
        if self._abort_timer is not None:
            self._abort_timer.cancel()
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._wake_drain_waiters()
        for waiter, _sent in self._pings.values():
            if not waiter.done():
                waiter.set_result(None)
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        """The transport's write buffer went over ``write_limit``."""
        self._write_paused = True

    def resume_writing(self) -> None:
        """The transport's write buffer drained below its low-water mark."""
        self._write_paused = False
        pong, self._pending_pong = self._pending_pong, None
        if pong is not None:
            self._answer_ping(pong)
        self._update_reading()
        self._wake_drain_waiters()

    # ------------------------------------------------------------------ internals
    def _closed_error(self) -> ConnectionClosed:
        return ConnectionClosed(
            self.close_code if self.close_code is not None else CloseCode.ABNORMAL,
            self.close_reason,
        )

    def _write(self, frame: bytes) -> None:
        if not self.closed:
            self.transport.write(frame)

    async def _drain(self) -> None:
        if self._write_paused and not self.closed:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._drain_waiters:
                    self._drain_waiters.remove(waiter)
        if self.closed:
            raise self._closed_error()

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _queue(self, message: str | bytes) -> None:
        if self._close_sent:
            self.dropped_messages += 1
            return
        self._messages.append(message)
        self._queued_bytes += len(message)
        over = len(self._messages) >= self.max_queue or self._queued_bytes >= self.max_queue_bytes
        if over and not self._queue_full:
            self._queue_full = True
            self._update_reading()

    def _update_reading(self) -> None:
        """Read from the socket unless the queue is full or a pong waits for the write
        buffer to drain (until the server's close frame is out: then the client's must
        be read)."""
        waiting = self._queue_full or self._pending_pong is not None
        pause = waiting and not self._close_sent
        if pause != self._reading_paused and not self.closed:
            self._reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _answer_ping(self, payload: bytes) -> None:
        """Pong now, or once the write buffer drained (only the latest ping's payload)."""
        if self._close_sent:
            return
        if self._write_paused:
            self._pending_pong = payload
            self._update_reading()
        else:
            self._write(encode_frame(Opcode.PONG, payload))

    def _below_low_water(self) -> bool:
        return (
            len(self._messages) <= self.max_queue // 4
            and self._queued_bytes <= self.max_queue_bytes // 4
        )

    def _closed_by_client(self, close: Close) -> None:
        self.close_code, self.close_reason = close.code, close.reason
        self._stop_receiving()
        if not self._close_sent:
            self._close_sent = True
            self._write(encode_frame(Opcode.CLOSE, close_payload(close.code)))
        # The server closes TCP first (RFC 6455 §7.1.1), bounded like any close.
        self.transport.close()
        self._arm_abort()

    def _pong(self, payload: bytes) -> None:
        """Resolve the ping with ``payload`` and every ping sent before it."""
        if payload not in self._pings:
            return  # unsolicited: allowed, ignored
        now = self._loop.time()
        for key in list(self._pings):
            waiter, sent = self._pings.pop(key)
            if not waiter.done():
                waiter.set_result(now - sent)
                self.latency = now - sent
            if key == payload:
                break

    def _stop_receiving(self) -> None:
        self._receiving = False
        if self._recv_waiter is not None and not self._recv_waiter.done():
            self._recv_waiter.set_result(None)

    def _fail(self, code: int, reason: str) -> None:
        """Close with ``code`` without waiting for the client's close frame."""
        self.start_close(code, reason)
        self.transport.close()

    def _arm_abort(self) -> None:
        if self._abort_timer is None and not self.closed:
            self._abort_timer = self._loop.call_later(self.close_timeout, self.abort)

    async def _keep_alive(self, interval: float) -> None:
        while not self._close_sent:
            await asyncio.sleep(interval)
            if self._close_sent or self.closed:
                return
            try:
                await asyncio.wait_for(self.ping(), self.ping_timeout)
            except asyncio.TimeoutError:
                log.info("client %s did not answer a ping: dropping it", self.remote_address)
                self._fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
                return
            except ConnectionClosed:
                return
