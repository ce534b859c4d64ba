"""The host's WebSocket client for the guest agent (DESIGN §3 and §5).

One connection, calls multiplexed by id::

    client = await AgentClient.connect("127.0.0.1", port, token)
    result = await client.call("execute_shell", {"shell_command": "uname -a"})
    await client.close()

"Connected" means a full WebSocket handshake *and* an answer to our ``connect``
message: QEMU's user-mode forwarding accepts the host's TCP connection even when
nothing listens in the guest, so an open socket proves nothing. Calls, results and
events are routed by :class:`~pytest_adare.agent.call_router.CallRouter`; this module only
moves WebSocket text frames. When the connection drops, every pending call fails at
once with :class:`AgentDisconnected`.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from pytest_adare.agent.call_router import (
    CLIENT_INFO,
    DEFAULT_CALL_TIMEOUT,
    TIMEOUT_GRACE,
    CallRouter,
)
from pytest_adare.errors import AgentDisconnected, AgentUnreachable, ProtocolViolation

__all__ = [
    "CLIENT_INFO",
    "DEFAULT_CALL_TIMEOUT",
    "TIMEOUT_GRACE",
    "AgentClient",
    "describe_error",
]


def describe_error(exc: BaseException) -> str:
    """One line naming an exception, even when its text is empty."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AgentClient(CallRouter):
    """A live WebSocket connection to the agent; create it with :meth:`connect`."""

    def __init__(self, websocket: ClientConnection, peer: str) -> None:
        super().__init__(peer)
        self._ws = websocket
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
                if isinstance(frame, bytes):
                    raise ProtocolViolation(
                        f"the agent at {self.peer} sent a binary frame ({len(frame)} bytes)"
                    )
                self._receive(frame)
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
