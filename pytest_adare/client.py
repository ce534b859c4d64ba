"""The host's WebSocket client for the guest agent (DESIGN §3 and §5).

One connection, calls multiplexed by id::

    client = await AgentClient.connect("127.0.0.1", port, token)
    result = await client.call("execute_shell", {"shell_command": "uname -a"})
    await client.close()

"Connected" means a full WebSocket handshake *and* an answer to our ``connect``
message: QEMU's user-mode forwarding accepts the host's TCP connection even when
nothing listens in the guest, so an open socket proves nothing. When the connection
drops, every pending call fails at once with :class:`AgentDisconnected`. Events go to
subscribers from their own task, so a slow subscriber never delays a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from adare_guest import __version__
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
from pytest_adare.connection import EventCallback
from pytest_adare.errors import (
    AgentDisconnected,
    AgentUnreachable,
    ProtocolViolation,
    ToolError,
    VMTimeout,
)

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT = 300.0
"""Host-side bound on a call when neither the caller nor the tool's params give one."""
TIMEOUT_GRACE = 30.0
"""Added to a tool's own ``timeout`` param: the agent enforces that one and answers."""
CLIENT_INFO = {"name": "pytest-adare", "version": __version__, "protocol_version": PROTOCOL_VERSION}


def describe_error(exc: BaseException) -> str:
    """One line naming an exception, even when its text is empty."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AgentClient:
    """A live WebSocket connection to the agent; create it with :meth:`connect`."""

    def __init__(self, websocket: ClientConnection, peer: str) -> None:
        self.peer = peer
        self._ws = websocket
        self._pending: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._subscribers: list[EventCallback] = []
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._connect_reply: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._welcome: dict[str, Any] = {}
        self._failure: Exception | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._reader = asyncio.create_task(self._read_loop(), name=f"agent-reader {peer}")
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name=f"agent-events {peer}")

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
    ) -> AgentClient:
        """Connect and complete the ``connect`` exchange, retrying with a short backoff.

        :raise AgentUnreachable: when every attempt failed (``details["attempts"]`` lists
            each error) or the agent rejected the token.
        """
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        failures: list[str] = []
        for attempt in range(attempts):
            try:
                return await cls._connect_once(host, port, token, attempt_timeout)
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
        cls, host: str, port: int, token: str | None, timeout: float
    ) -> AgentClient:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        websocket = await ws_connect(
            f"ws://{host}:{port}",
            additional_headers=headers,
            max_size=None,  # guest→host is unlimited (screenshots, file chunks)
            ping_interval=None,  # a paused VM (savevm) must not look like a dead peer
            compression=None,  # deflate of base64 chunks costs more than it saves
            open_timeout=timeout,
        )
        client = cls(websocket, f"{host}:{port}")
        try:
            await client._exchange_connect(timeout)
        except BaseException:
            await client.close()
            raise
        return client

    async def _exchange_connect(self, timeout: float) -> None:
        hello = Connect(client_info=dict(CLIENT_INFO), id=new_id(), timestamp=time.time())
        await self._send(encode_message(hello))
        try:
            await asyncio.wait_for(asyncio.shield(self._connect_reply), timeout)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(
                f"no answer to our connect message within {timeout:.1f} s"
            ) from None

    # -- public API -----------------------------------------------------------------

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
            own = params.get("timeout")
            timeout = (
                float(own) + TIMEOUT_GRACE
                if isinstance(own, (int, float))
                else DEFAULT_CALL_TIMEOUT
            )
        message = ToolCall(tool=tool, params=params, id=new_id(), timestamp=time.time())
        text = encode_message(message)
        size = len(text.encode())
        if size > MAX_HOST_MESSAGE:
            raise ValueError(
                f"tool call {tool!r} is {size / 2**20:.1f} MiB, above the "
                f"{MAX_HOST_MESSAGE // 2**20} MiB host→guest message limit; send smaller chunks"
            )
        if self._failure is not None:
            raise AgentDisconnected(f"cannot call {tool!r}: {self._failure}")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = (tool, future)
        try:
            await self._send(text)
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise VMTimeout(f"the agent's answer to {tool!r} from {self.peer}", timeout) from None
        finally:
            self._pending.pop(message.id, None)

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` for every agent event; returns the unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    async def close(self) -> None:
        """Close the connection; calls still pending fail with :class:`AgentDisconnected`."""
        self._fail_all(
            AgentDisconnected(f"connection to the agent at {self.peer} closed by the host")
        )
        await self._ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._reader, 5.0)
        self._events.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await asyncio.wait_for(self._dispatcher, 5.0)

    async def wait_closed(self) -> Exception:
        """Wait until the connection is gone and return why."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._reader)
        assert self._failure is not None
        return self._failure

    # -- internals ------------------------------------------------------------------

    async def _send(self, text: str) -> None:
        try:
            await self._ws.send(text)
        except ConnectionClosed as exc:
            raise AgentDisconnected(
                f"connection to the agent at {self.peer} closed: {describe_error(exc)}"
            ) from exc

    async def _read_loop(self) -> None:
        failure: Exception
        try:
            async for frame in self._ws:
                self._handle(self._parse(frame))
            failure = AgentDisconnected(f"the agent at {self.peer} closed the connection")
        except ConnectionClosed as exc:
            failure = AgentDisconnected(
                f"connection to the agent at {self.peer} dropped: {describe_error(exc)}"
            )
        except ProtocolViolation as exc:
            failure = exc
            await self._ws.close(code=1002, reason="protocol violation")
        self._fail_all(failure)
        self._events.put_nowait(None)

    def _parse(self, frame: str | bytes) -> Any:
        if isinstance(frame, bytes):
            raise ProtocolViolation(
                f"the agent at {self.peer} sent a binary frame ({len(frame)} bytes)"
            )
        try:
            return parse_message(frame)
        except ProtocolError as exc:
            raise ProtocolViolation(
                f"the agent at {self.peer} sent an invalid message ({exc}): {frame[:200]!r}"
            ) from exc

    def _handle(self, message: Any) -> None:
        if isinstance(message, ToolResult):
            self._resolve(message)
        elif isinstance(message, Event):
            server_info = message.data.get("server_info")
            if isinstance(server_info, dict) and not self._welcome:
                self._welcome = dict(server_info)
            self._events.put_nowait(message)
        elif isinstance(message, Connect):
            if not self._connect_reply.done():
                self._connect_reply.set_result(dict(message.client_info))
        elif isinstance(message, Ping):
            pong = encode_message(Pong(id=message.id, timestamp=time.time()))
            task = asyncio.create_task(self._send_quietly(pong))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

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

    async def _send_quietly(self, text: str) -> None:
        with contextlib.suppress(AgentDisconnected):
            await self._send(text)

    def _fail_all(self, failure: Exception) -> None:
        if self._failure is None:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for tool, future in pending.values():
            if not future.done():
                error = type(self._failure)(f"{tool!r} got no answer: {self._failure}")
                future.set_exception(error)
        if not self._connect_reply.done():
            self._connect_reply.set_exception(type(self._failure)(str(self._failure)))
            self._connect_reply.exception()  # retrieved here; connect() re-raises via shield

    async def _dispatch_loop(self) -> None:
        while (event := await self._events.get()) is not None:
            for callback in list(self._subscribers):
                try:
                    outcome = callback(event)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    log.exception("event subscriber %r failed on %s", callback, event.event_type)
