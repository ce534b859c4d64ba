"""A WebSocket server on asyncio and the standard library only (runs on Python 3.9).

:func:`serve` listens and, for every client, reads the opening handshake
(:mod:`adare_guest.websocket_handshake`), lets ``process_request`` refuse it with an
HTTP response (authentication), accepts it with 101 and runs ``handler(connection)``
(:class:`~adare_guest.websocket_connection.WebSocketConnection`) in its own task.
When the handler returns, the connection is closed (1000; 1011 when it raised).

Bounds: a client gets ``handshake_timeout`` seconds to send its whole request head,
then it is dropped; a refused client gets its HTTP answer and ``close_timeout``
seconds to take it. :meth:`WebSocketServer.close` stops listening, drops clients
still in their handshake and closes every connection with 1001 (each cut off after
``close_timeout``); :meth:`WebSocketServer.wait_closed` returns once every handler
has finished and every socket is closed.

>>> async def echo(connection):                                 # doctest: +SKIP
...     async for message in connection:
...         await connection.send(message)
>>> server = WebSocketServer(echo, max_size=1 << 20)             # doctest: +SKIP
>>> await server.listen("127.0.0.1", 0)                        # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from adare_guest.websocket_connection import WebSocketConnection
from adare_guest.websocket_frames import CloseCode
from adare_guest.websocket_handshake import (
    HandshakeError,
    HttpResponse,
    Request,
    RequestReader,
    check_upgrade,
    switching_protocols,
)

log = logging.getLogger("adare_guest.websocket")

Handler = Callable[[WebSocketConnection], Awaitable[None]]
"""Serves one accepted connection; the connection is closed when it returns."""
ProcessRequest = Callable[[Request, Any], Optional[HttpResponse]]  # run time: 3.9
"""``(request, remote address)``: a response refuses the handshake, None lets it go on."""

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client has to send its whole opening handshake."""


class WebSocketServer:
    """Listening sockets, the connections they accepted and their handler tasks."""

    def __init__(
        self,
        handler: Handler,
        *,
        process_request: ProcessRequest | None = None,
        max_size: int,
        ping_interval: float | None = 20.0,
        ping_timeout: float = 20.0,
        close_timeout: float = 10.0,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.handler = handler
        self.process_request = process_request
        self.max_size = max_size
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.close_timeout = close_timeout
        self.handshake_timeout = handshake_timeout
        self.connections: set[WebSocketConnection] = set()
        """Open connections (after their handshake)."""
        self._protocols: set[_ServerProtocol] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._listener: asyncio.AbstractServer | None = None
        self._close_requested = asyncio.Event()
        self._closing: asyncio.Task[None] | None = None

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._close_requested.is_set()

    @property
    def sockets(self) -> list[Any]:
        """The listening sockets (empty once closed)."""
        if self._listener is None:
            return []
        return list(getattr(self._listener, "sockets", None) or ())

    async def listen(self, host: str, port: int) -> None:
        """Bind and start accepting clients.

        :raise OSError: the address cannot be bound.
        """
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(lambda: _ServerProtocol(self), host, port)

    def close(self) -> None:
        """Stop listening; drop clients in their handshake; close connections (1001)."""
        if self._closing is not None:
            return
        self._close_requested.set()
        if self._listener is not None:
            self._listener.close()
        for protocol in list(self._protocols):
            if protocol.connection is None:
                protocol.abort()
        for connection in list(self.connections):
            connection.start_close(CloseCode.GOING_AWAY, "server shutting down")
        self._closing = asyncio.get_running_loop().create_task(self._finish_closing())

    async def wait_closed(self) -> None:
        """Return once :meth:`close` was called and everything it closes is closed."""
        await self._close_requested.wait()
        assert self._closing is not None
        await asyncio.shield(self._closing)

    async def _finish_closing(self) -> None:
        if self._handlers:
            await asyncio.wait(set(self._handlers))
        lost = [protocol.lost for protocol in self._protocols]
        if lost:
            await asyncio.wait(lost)

    def _accepted(self, connection: WebSocketConnection) -> None:
        self.connections.add(connection)
        task = asyncio.get_running_loop().create_task(self._run_handler(connection))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _run_handler(self, connection: WebSocketConnection) -> None:
        code = CloseCode.NORMAL
        try:
            await self.handler(connection)
        except asyncio.CancelledError:
            connection.abort()
            raise
        except Exception:
            log.exception("the handler of %s failed", connection.remote_address)
            code = CloseCode.INTERNAL_ERROR
        try:
            await connection.close(code)
        finally:
            self.connections.discard(connection)


class _ServerProtocol(asyncio.Protocol):
    """One client's TCP connection: the handshake here, then its WebSocketConnection."""

    def __init__(self, server: WebSocketServer) -> None:
        self.server = server
        self.connection: WebSocketConnection | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._reader = RequestReader()
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.server._protocols.add(self)
        if self.server.closing:
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.server.handshake_timeout, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self.connection is not None:
            self.connection.data_received(data)
            return
        if self._refused:
            return
        try:
            request = self._reader.feed(data)
            if request is not None:
                self._handshake(request)
        except HandshakeError as exc:
            self._refuse(exc.response(), exc.reason)

    def eof_received(self) -> bool:
        if self.connection is not None:
            self.connection.eof_received()
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.server._protocols.discard(self)
        if self.connection is not None:
            self.connection.connection_lost(exc)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.connection is not None:
            self.connection.pause_writing()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.connection is not None:
            self.connection.resume_writing()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    @property
    def peer(self) -> Any:
        return None if self._transport is None else self._transport.get_extra_info("peername")

    def _handshake(self, request: Request) -> None:
        """Refuse ``request`` with an HTTP response, or accept it and start its handler."""
        server, transport = self.server, self._transport
        assert transport is not None
        if server.closing:
            self._refuse(HttpResponse.text(503, "shutting down"), "")
            return
        if server.process_request is not None:
            try:
                response = server.process_request(request, self.peer)
            except Exception:
                log.exception("process_request failed for %s", self.peer)
                response = HttpResponse.text(500, "internal error")
            if response is not None:
                self._refuse(response, "")  # the hook logs its own reasons
                return
        key = check_upgrade(request)
        self._cancel_timer()
        transport.write(switching_protocols(key))
        connection = WebSocketConnection(
            transport,
            max_size=server.max_size,
            ping_interval=server.ping_interval,
            ping_timeout=server.ping_timeout,
            close_timeout=server.close_timeout,
        )
        self.connection = connection
        if self._write_paused:
            connection.pause_writing()
        server._accepted(connection)
        leftover = self._reader.leftover
        if leftover:
            connection.data_received(leftover)

    def _refuse(self, response: HttpResponse, why: str) -> None:
        transport = self._transport
        assert transport is not None
        self._refused = True
        self._cancel_timer()
        if why:
            log.info("refused the handshake of %s: %d %s", self.peer, response.status, why)
        transport.write(response.serialize())
        transport.close()
        # A client that does not read the answer must not keep the socket open.
        self._timer = asyncio.get_running_loop().call_later(
            self.server.close_timeout, transport.abort
        )

    def _handshake_timed_out(self) -> None:
        log.info("client %s sent no handshake in time: dropping it", self.peer)
        self.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
