"""A real agent on 127.0.0.1 (port 0) and a strict WebSocket test client.

The client behaves like the reference host client: it drops nothing silently but
*fails* on any message whose top-level keys differ from DESIGN §3, so every
test that talks to the agent also checks the agent's envelopes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from websockets.asyncio.client import ClientConnection, connect

from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer
from pytest_adare.loop_thread import shared_loop

# Written out here on purpose (not imported): the test checks the agent against DESIGN §3.
DESIGN_ENVELOPES = {
    "tool_call": {"type", "id", "timestamp", "tool", "params"},
    "tool_result": {"type", "id", "timestamp", "success", "result", "error"},
    "event": {"type", "id", "timestamp", "event_type", "data"},
    "status": {"type", "id", "timestamp", "status", "data"},
    "connect": {"type", "id", "timestamp", "client_info"},
    "ping": {"type", "id", "timestamp"},
    "pong": {"type", "id", "timestamp"},
}
DESIGN_EVENT_TYPES = set(
    "test_start test_complete test_failed gui_click gui_find gui_keypress gui_idle "
    "gui_drag command_start command_complete log error progress".split()
)
WAIT = 30.0


class EnvelopeViolation(AssertionError):
    """The agent sent a message the reference host client would reject."""


def strict_parse(text: str | bytes) -> dict[str, Any]:
    """Parse one agent message the way the reference host client does (strictly)."""
    if not isinstance(text, str):
        raise EnvelopeViolation(f"binary frame from the agent: {text[:80]!r}")
    msg = json.loads(text)
    if not isinstance(msg, dict):
        raise EnvelopeViolation(f"not an object: {text[:200]}")
    expected = DESIGN_ENVELOPES.get(msg.get("type"))  # type: ignore[arg-type]
    if expected is None:
        raise EnvelopeViolation(f"unknown type: {text[:200]}")
    if set(msg) != expected:
        raise EnvelopeViolation(f"keys {sorted(msg)} != {sorted(expected)}: {text[:200]}")
    if not isinstance(msg["id"], str) or not msg["id"]:
        raise EnvelopeViolation(f"bad id: {text[:200]}")
    ts = msg["timestamp"]
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, (int, float))):
        raise EnvelopeViolation(f"bad timestamp: {text[:200]}")
    if msg["type"] == "event" and msg["event_type"] not in DESIGN_EVENT_TYPES:
        raise EnvelopeViolation(f"unknown event type: {text[:200]}")
    if msg["type"] == "tool_result":
        if not isinstance(msg["success"], bool):
            raise EnvelopeViolation(f"success not bool: {text[:200]}")
        if msg["success"] and not isinstance(msg["result"], dict):
            raise EnvelopeViolation(f"successful result not an object: {text[:200]}")
        if not msg["success"] and not isinstance(msg["error"], str):
            raise EnvelopeViolation(f"failed result without error text: {text[:200]}")
    return msg


class StrictClient:
    """A WebSocket client that checks every envelope and correlates results by id."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.messages: list[dict[str, Any]] = []
        self.violation: EnvelopeViolation | None = None
        self._results: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._arrived = asyncio.Condition()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                try:
                    msg = strict_parse(text)
                except EnvelopeViolation as exc:
                    self.violation = exc
                    for future in self._results.values():
                        if not future.done():
                            future.set_exception(exc)
                            future.exception()
                    continue
                self.messages.append(msg)
                if msg["type"] == "tool_result" and msg["id"] in self._results:
                    future = self._results[msg["id"]]
                    if not future.done():
                        future.set_result(msg)
                async with self._arrived:
                    self._arrived.notify_all()
        except Exception:
            pass
        finally:
            for future in self._results.values():
                if not future.done():
                    future.set_exception(ConnectionError("connection closed"))
                    future.exception()  # marks it retrieved: unawaited calls are fine here
            async with self._arrived:
                self._arrived.notify_all()

    async def send_raw(self, text: str) -> None:
        await self.ws.send(text)

    async def send_call(self, tool: str, params: dict[str, Any] | None = None, **kw: Any) -> str:
        """Send a tool_call; return its id (the result is awaited with :meth:`result`)."""
        call_id = kw.get("id") or os.urandom(8).hex()
        self._results[call_id] = asyncio.get_running_loop().create_future()
        await self.ws.send(
            json.dumps(
                {
                    "type": "tool_call",
                    "id": call_id,
                    "timestamp": time.time(),
                    "tool": tool,
                    "params": params or {},
                }
            )
        )
        return call_id

    async def result(self, call_id: str, timeout: float = WAIT) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(asyncio.shield(self._results[call_id]), timeout)
        finally:
            if self._results[call_id].done():
                del self._results[call_id]

    async def call(
        self, tool: str, params: dict[str, Any] | None = None, timeout: float = WAIT
    ) -> dict[str, Any]:
        """The whole tool_result envelope of one call."""
        return await self.result(await self.send_call(tool, params), timeout)

    async def ok(self, tool: str, _wait: float = WAIT, **params: Any) -> dict[str, Any]:
        """The ``result`` of a call that must succeed at protocol level."""
        msg = await self.call(tool, params, _wait)
        assert msg["success"], f"{tool} failed: {msg['error']}"
        return dict(msg["result"])

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT
    ) -> dict[str, Any]:
        """The first message (already received or arriving) that matches ``predicate``."""

        async def scan() -> dict[str, Any]:
            async with self._arrived:
                while True:
                    for msg in self.messages:
                        if predicate(msg):
                            return msg
                    if self._reader.done():
                        raise ConnectionError("connection closed while waiting")
                    await self._arrived.wait()

        return await asyncio.wait_for(scan(), timeout)

    def events(self, call_id: str | None = None) -> list[dict[str, Any]]:
        return [
            m
            for m in self.messages
            if m["type"] == "event" and (call_id is None or m["data"].get("call_id") == call_id)
        ]

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self._reader, WAIT)
        if self.violation is not None:
            raise self.violation


ClientFactory = Callable[..., Awaitable[StrictClient]]


@pytest.fixture
def strict_client_class() -> type[StrictClient]:
    """:class:`StrictClient`, for tests that run their own server."""
    return StrictClient


@pytest.fixture
def design_envelopes() -> dict[str, set[str]]:
    """DESIGN §3's envelope keys by message type."""
    return DESIGN_ENVELOPES


@pytest.fixture
def design_event_types() -> set[str]:
    """DESIGN §3's event types."""
    return DESIGN_EVENT_TYPES


@pytest.fixture
def agent_config(tmp_path: Path) -> AgentConfig:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return AgentConfig(host="127.0.0.1", port=0, run_dir=run_dir)


@pytest.fixture
def shared_loop_agent(agent_config: AgentConfig) -> Iterator[AdareVMServer]:
    """An agent (on the test module's ``agent_config``) on the host's shared loop thread,
    for the synchronous facade."""
    server = AdareVMServer(agent_config)
    shared_loop().run(server.start(), timeout=30)
    yield server
    shared_loop().run(server.stop(), timeout=30)


@pytest_asyncio.fixture
async def agent(agent_config: AgentConfig) -> AsyncIterator[AdareVMServer]:
    """A real AdareVMServer listening on 127.0.0.1:<free port> in this event loop."""
    server = AdareVMServer(agent_config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def agent_url(server: AdareVMServer) -> str:
    assert server.listen_address is not None
    return f"ws://127.0.0.1:{server.listen_address[1]}"


@pytest_asyncio.fixture
async def connect_client(agent: AdareVMServer) -> AsyncIterator[ClientFactory]:
    """Open more strict clients (optionally with a token); all are closed afterwards."""
    clients: list[StrictClient] = []

    async def open_client(token: str | None = None) -> StrictClient:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        ws = await connect(
            agent_url(agent), additional_headers=headers, max_size=None, compression=None
        )
        client = StrictClient(ws)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()


@pytest_asyncio.fixture
async def client(connect_client: ClientFactory) -> StrictClient:
    """One strict client connected to :func:`agent`."""
    return await connect_client()


@pytest.fixture
def strict_parser() -> Callable[[str | bytes], dict[str, Any]]:
    """:func:`strict_parse`, for tests that check raw agent output themselves."""
    return strict_parse


AgentStarter = Callable[..., Awaitable[AdareVMServer]]


@pytest_asyncio.fixture
async def start_agent() -> AsyncIterator[AgentStarter]:
    """Start agents of a test's own making: ``await start_agent(config, groups, **limits)``
    sets each of ``limits`` (e.g. ``send_timeout=1.0``) on the server before it listens.
    Every agent is stopped afterwards."""
    servers: list[AdareVMServer] = []

    async def start(
        config: AgentConfig, groups: list[Any] | None = None, **limits: Any
    ) -> AdareVMServer:
        server = AdareVMServer(config, groups)
        for name, value in limits.items():
            if not hasattr(server, name):
                raise AttributeError(f"AdareVMServer has no limit {name!r}")
            setattr(server, name, value)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


@pytest_asyncio.fixture
async def client_of() -> AsyncIterator[Callable[[AdareVMServer], Awaitable[StrictClient]]]:
    """Open a strict client to any running agent; every client is closed afterwards."""
    clients: list[StrictClient] = []

    async def open_client(server: AdareVMServer) -> StrictClient:
        ws = await connect(agent_url(server), max_size=None, compression=None)
        clients.append(StrictClient(ws))
        return clients[-1]

    yield open_client
    for client in clients:
        await client.close()


@pytest.fixture(scope="session", autouse=True)
def _close_pyautogui_display() -> Iterator[None]:
    """pyautogui opens an X display at import and never closes it (a ResourceWarning at
    exit): close it once the session's GUI tool tests are done."""
    yield
    x11 = sys.modules.get("pyautogui._pyautogui_x11")
    connection = getattr(getattr(x11, "_display", None), "display", None)
    sock = getattr(connection, "socket", None)
    if sock is not None:  # the X server may be gone already: just let go of the socket
        sock.close()
