"""A WebSocket server on asyncio and the standard library only (runs on Python 3.9).

:func:`serve` listens and, for every client, reads the opening handshake
(:mod:`adare_guest.websocket.handshake`), lets ``process_request`` refuse it with an
HTTP response (authentication), accepts it with 101 and runs ``handler(connection)``
(:class:`~adare_guest.websocket.connection.WebSocketConnection`) in its own task.
When the handler returns, the connection is closed (1000; 1011 when it raised).

Bounds: a client gets ``handshake_timeout`` seconds to send its whole request head,
then it is dropped; a refused client gets its HTTP answer and ``close_timeout``
seconds to take it. At most ``max_handshakes`` connections (``max_handshakes_per_peer``
from one address) may be open without having been accepted yet (in their handshake
or being refused): one more drops one of them (of its own address, when that address
is at its limit): the oldest refused one, else the oldest that has sent nothing, else
the oldest. So idle sockets cannot pin the agent's file descriptors, and a real
client, which sends its handshake at once, still gets in during a flood of them. A
failed ``accept`` (out of file descriptors) drops every pending connection that was
refused or has sent nothing, and is logged as one line per 10 s with a count
(:mod:`adare_guest.repeated_log`), not with a traceback per attempt.

:meth:`WebSocketServer.close` stops listening, drops clients still in their handshake
and closes every connection with 1001 (each cut off after ``close_timeout``);
:meth:`WebSocketServer.wait_closed` returns once every handler has finished and every
socket is closed.

>>> async def echo(connection):                                 # doctest: +SKIP
...     async for message in connection:
...         await connection.send(message)
>>> server = WebSocketServer(echo, max_size=1 << 20)             # doctest: +SKIP
>>> await server.listen("127.0.0.1", 0)                        # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import select
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from adare_guest.repeated_log import RepeatedLog
from adare_guest.websocket.connection import WebSocketConnection
from adare_guest.websocket.frames import CloseCode
from adare_guest.websocket.handshake import (
    HandshakeError,
    HttpResponse,
    Request,
    RequestReader,
    check_upgrade,
    switching_protocols,
)

log = logging.getLogger("adare_guest.websocket")
repeated = RepeatedLog(log)

Handler = Callable[[WebSocketConnection], Awaitable[None]]
"""Serves one accepted connection; the connection is closed when it returns."""
ProcessRequest = Callable[[Request, Any], Optional[HttpResponse]]  # run time: 3.9
"""``(request, remote address)``: a response refuses the handshake, None lets it go on."""

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a client has to send its whole opening handshake."""
MAX_HANDSHAKES = 256
"""Connections open at once that were not accepted (yet): in their handshake or refused."""
MAX_HANDSHAKES_PER_PEER = 128
"""Of :data:`MAX_HANDSHAKES`, how many may come from one address (more than asyncio
accepts in one go, 100, so a new client's request is read before it can be dropped)."""
_ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's message for EMFILE & co


class WebSocketServer:
    """Listening sockets, the connections they accepted and their handler tasks."""

    def __init__(
        self,
        handler: Handler,
        *,
        process_request: ProcessRequest | None = None,
        max_size: int,
        max_text: int | None = None,
        ping_interval: float | None = 20.0,
        ping_timeout: float = 20.0,
        close_timeout: float = 10.0,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_handshakes: int = MAX_HANDSHAKES,
        max_handshakes_per_peer: int = MAX_HANDSHAKES_PER_PEER,
    ) -> None:
        self.handler = handler
        self.process_request = process_request
        self.max_size = max_size
        self.max_text = max_text
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.close_timeout = close_timeout
        self.handshake_timeout = handshake_timeout
        self.max_handshakes = max_handshakes
        self.max_handshakes_per_peer = max_handshakes_per_peer
        self.connections: set[WebSocketConnection] = set()
        """Open connections (after their handshake)."""
        self._protocols: set[_ServerProtocol] = set()
        # Not accepted (yet), oldest first (dicts keep insertion order), overall and by
        # address: what a flood of idle sockets fills and what is dropped to make room.
        self._pending: dict[_ServerProtocol, None] = {}
        self._pending_by_peer: dict[str, dict[_ServerProtocol, None]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._listener: asyncio.AbstractServer | None = None
        self._close_requested = asyncio.Event()
        self._closing: asyncio.Task[None] | None = None
        self._exception_handlers: tuple[Any, Any] | None = None  # (ours, the one before)
        self._last_descriptor_drop = float("-inf")

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
        self._chain_exception_handler(loop)

    @property
    def pending_handshakes(self) -> int:
        """Connections open that were not accepted (yet)."""
        return len(self._pending)

    def _chain_exception_handler(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take over asyncio's report of a failed ``accept`` on our sockets.

        asyncio logs it with a traceback, up to 100 times per burst of connections (once
        per pending connection it tries), and retries a second later; that is kept, the
        report becomes one counted line per 10 s.
        """
        previous = loop.get_exception_handler()
        mine = {sock.fileno() for sock in self.sockets}

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc, sock = context.get("exception"), context.get("socket")
            if (
                context.get("message") == _ACCEPT_FAILED
                and isinstance(exc, OSError)
                and sock is not None
                and sock.fileno() in mine
            ):
                repeated.warning(
                    "accept", "cannot accept connections: %s; retrying", exc.strerror or exc
                )
                self._out_of_descriptors(loop.time())
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)
        self._exception_handlers = (handler, previous)

    def _out_of_descriptors(self, now: float) -> None:
        """Drop the pending connections that were refused or have sent nothing, so
        asyncio's retry of the accept (a second later) finds descriptors free; once per
        retry, not per report (asyncio reports the failure for each connection it tried)."""
        if now - self._last_descriptor_drop < 1.0:
            return
        self._last_descriptor_drop = now
        for protocol in list(self._pending):
            if protocol.idle:
                self._drop_pending(protocol)

    def _unchain_exception_handler(self) -> None:
        installed, self._exception_handlers = self._exception_handlers, None
        loop = asyncio.get_running_loop()
        if installed is not None and loop.get_exception_handler() is installed[0]:
            loop.set_exception_handler(installed[1])

    def close(self) -> None:
        """Stop listening; drop clients in their handshake; close connections (1001)."""
        if self._closing is not None:
            return
        self._close_requested.set()
        if self._listener is not None:
            self._listener.close()
        self._unchain_exception_handler()
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

    def _admit(self, protocol: _ServerProtocol) -> None:
        """Count a new connection as pending, dropping the idlest pending one when full."""
        same_peer = self._pending_by_peer.get(protocol.peer_host, {})
        if len(same_peer) >= self.max_handshakes_per_peer:
            full, limit = same_peer, f"{self.max_handshakes_per_peer} per address"
        elif len(self._pending) >= self.max_handshakes:
            full, limit = self._pending, f"{self.max_handshakes} in all"
        else:
            full = None
        if full is not None:
            victim = (
                next((p for p in full if p.refused), None)
                or next((p for p in full if p.idle), None)
                or next(iter(full))
            )
            repeated.info(
                "evicted",
                "too many connections in their handshake (limit %s): dropping one from %s",
                limit,
                victim.peer_host,
            )
            self._drop_pending(victim)
        self._pending[protocol] = None
        # Looked up again: dropping the address's only other connection removed its entry.
        self._pending_by_peer.setdefault(protocol.peer_host, {})[protocol] = None

    def _drop_pending(self, protocol: _ServerProtocol) -> None:
        self._settled(protocol)
        protocol.abort()

    def _settled(self, protocol: _ServerProtocol) -> None:
        """``protocol`` is no longer pending (accepted, dropped or gone)."""
        if protocol not in self._pending:
            return
        del self._pending[protocol]
        same_peer = self._pending_by_peer[protocol.peer_host]
        del same_peer[protocol]
        if not same_peer:
            del self._pending_by_peer[protocol.peer_host]

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


def _readable(sock: Any) -> bool:
    """Whether ``sock`` has bytes (or an end of stream) waiting to be read."""
    try:
        fd = sock.fileno()
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])  # Windows: no poll()
    except (OSError, ValueError, AttributeError):
        return False


class _ServerProtocol(asyncio.Protocol):
    """One client's TCP connection: the handshake here, then its WebSocketConnection."""

    def __init__(self, server: WebSocketServer) -> None:
        self.server = server
        self.connection: WebSocketConnection | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._reader = RequestReader()
        self._timer: asyncio.TimerHandle | None = None
        self.refused = False
        """It was answered with an HTTP error and is being closed."""
        self.heard_from = False
        """It has sent at least one byte."""
        self._write_paused = False
        self.peer_host = ""
        """The client's address without its port (what the per-address limit counts)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = self.peer
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        self.server._protocols.add(self)
        if self.server.closing:
            transport.abort()
            return
        self.server._admit(self)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.server.handshake_timeout, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self.connection is not None:
            self.connection.data_received(data)
            return
        self.heard_from = True
        if self.refused:
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
        self.server._settled(self)
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
    def idle(self) -> bool:
        """Refused, or silent so far: the first to drop when too many are pending.

        A client's request may sit unread in the socket for a few loop iterations after
        the accept while a flood is accepted in bursts of 100, so the socket is asked.
        """
        if self.refused:
            return True
        if self.heard_from or self._transport is None:
            return False
        return not _readable(self._transport.get_extra_info("socket"))

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
            max_text=server.max_text,
            ping_interval=server.ping_interval,
            ping_timeout=server.ping_timeout,
            close_timeout=server.close_timeout,
        )
        connection.request = request
        self.connection = connection
        server._settled(self)
        if self._write_paused:
            connection.pause_writing()
        server._accepted(connection)
        leftover = self._reader.leftover
        if leftover:
            connection.data_received(leftover)

    def _refuse(self, response: HttpResponse, why: str) -> None:
        transport = self._transport
        assert transport is not None
        self.refused = True
        self._cancel_timer()
        if why:
            repeated.info(
                "refused", "refused the handshake of %s: %d %s", self.peer, response.status, why
            )
        transport.write(response.serialize())
        transport.close()
        # A client that does not read the answer must not keep the socket open.
        self._timer = asyncio.get_running_loop().call_later(
            self.server.close_timeout, transport.abort
        )

    def _handshake_timed_out(self) -> None:
        repeated.info("timeout", "client %s sent no handshake in time: dropping it", self.peer)
        self.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
