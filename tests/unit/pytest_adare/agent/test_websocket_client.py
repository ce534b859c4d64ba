"""AgentClient against a real WebSocket server on localhost, scripted per test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from adare_guest.protocol import (
    Connect,
    Event,
    EventType,
    ToolResult,
    encode_message,
    parse_message,
)
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import (
    AgentDisconnected,
    AgentUnreachable,
    ProtocolViolation,
    ToolError,
)

pytestmark = pytest.mark.asyncio

TOKEN = "s3cret"
Script = Callable[[ServerConnection], Awaitable[None]]


def _check_token(connection: ServerConnection, request: Request) -> Response | None:
    if request.headers.get("Authorization") != f"Bearer {TOKEN}":
        return connection.respond(401, "bad token\n")
    return None


@asynccontextmanager
async def fake_agent(script: Script) -> AsyncIterator[int]:
    """Serve ``script`` after answering the ``connect`` message like the agent does."""

    async def handler(ws: ServerConnection) -> None:
        hello = parse_message(await ws.recv())
        assert isinstance(hello, Connect)
        await ws.send(encode_message(Connect(client_info={"version": "9.9", "tools": ["t"]})))
        await script(ws)

    async with serve(
        handler, "127.0.0.1", 0, process_request=_check_token, max_size=None
    ) as server:
        yield server.sockets[0].getsockname()[1]


async def received_calls(ws: ServerConnection, count: int) -> list[Any]:
    return [parse_message(await ws.recv()) for _ in range(count)]


async def test_call_returns_the_result_of_the_matching_id() -> None:
    async def script(ws: ServerConnection) -> None:
        first, second = await received_calls(ws, 2)
        # answer out of order: results are matched by id, not by position
        await ws.send(encode_message(ToolResult(second.id, True, {"n": 2})))
        await ws.send(encode_message(ToolResult(first.id, True, {"n": 1})))
        await ws.wait_closed()

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        assert client.server_info["version"] == "9.9"
        one, two = await asyncio.gather(client.call("a"), client.call("b"))
        assert (one, two) == ({"n": 1}, {"n": 2})
        await client.close()


async def test_drop_fails_every_pending_call_at_once() -> None:
    async def script(ws: ServerConnection) -> None:
        await received_calls(ws, 3)
        ws.transport.abort()  # no close frame: a dropped connection

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        calls = [client.call(f"tool{i}", timeout=30) for i in range(3)]
        outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert all(isinstance(o, AgentDisconnected) for o in outcomes), outcomes
        assert "tool0" in str(outcomes[0])
        with pytest.raises(AgentDisconnected):
            await client.call("after_drop")
        await client.close()


async def test_slow_subscriber_does_not_delay_results() -> None:
    async def script(ws: ServerConnection) -> None:
        (call,) = await received_calls(ws, 1)
        event = Event(EventType.PROGRESS, {"call_id": call.id, "done": 1})
        await ws.send(encode_message(event))
        await ws.send(encode_message(ToolResult(call.id, True, {"ok": True})))
        await ws.wait_closed()

    release = asyncio.Event()
    seen: list[Event] = []

    async def slow_subscriber(event: Event) -> None:
        await release.wait()
        seen.append(event)

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        unsubscribe = client.subscribe(slow_subscriber)
        assert await asyncio.wait_for(client.call("work"), 10) == {"ok": True}
        assert seen == []  # the result came while the subscriber still waited
        release.set()
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen[0].data["done"] == 1
        unsubscribe()
        await client.close()


async def test_unknown_envelope_key_is_a_protocol_violation() -> None:
    async def script(ws: ServerConnection) -> None:
        (call,) = await received_calls(ws, 1)
        bad = json.loads(encode_message(ToolResult(call.id, True, {})))
        bad["extra"] = 1
        await ws.send(json.dumps(bad))
        await ws.wait_closed()

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        with pytest.raises(ProtocolViolation, match="unexpected keys"):
            await asyncio.wait_for(client.call("x"), 10)
        await client.close()


async def test_success_false_raises_tool_error_with_the_agents_text() -> None:
    async def script(ws: ServerConnection) -> None:
        (call,) = await received_calls(ws, 1)
        await ws.send(encode_message(ToolResult(call.id, False, None, "unknown tool 'nope'")))
        await ws.wait_closed()

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        with pytest.raises(ToolError, match="unknown tool 'nope'") as caught:
            await client.call("nope")
        assert caught.value.tool == "nope"
        await client.close()


async def test_big_results_pass_and_big_calls_are_refused_before_sending() -> None:
    big = "x" * (20 * 2**20)

    async def script(ws: ServerConnection) -> None:
        (call,) = await received_calls(ws, 1)
        await ws.send(encode_message(ToolResult(call.id, True, {"blob": big})))
        await ws.wait_closed()

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        with pytest.raises(ValueError, match="16 MiB host→guest"):
            await client.call("push", {"data": "y" * (17 * 2**20)})
        result = await client.call("pull")  # the refused call never reached the server
        assert len(result["blob"]) == len(big)
        await client.close()


async def test_wrong_token_fails_at_once_naming_http_401() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.wait_closed()

    async with fake_agent(script) as port:
        with pytest.raises(AgentUnreachable, match=r"rejected our token \(HTTP 401\)"):
            await AgentClient.connect("127.0.0.1", port, "wrong", attempts=6)


async def test_accepting_tcp_without_an_agent_is_not_connected() -> None:
    """QEMU's user-net forwarding accepts TCP and then closes when nothing listens."""

    async def accept_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(accept_and_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(AgentUnreachable, match="all 3 connection attempts") as caught:
            await AgentClient.connect("127.0.0.1", port, TOKEN, attempts=3, backoff=0.01)
    assert len(caught.value.details["attempts"]) == 3


async def test_websocket_without_connect_answer_is_not_connected() -> None:
    async def silent(ws: ServerConnection) -> None:
        await ws.wait_closed()

    async with serve(silent, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(AgentUnreachable, match="no answer to our connect message"):
            await AgentClient.connect(
                "127.0.0.1", port, None, attempts=2, backoff=0.01, attempt_timeout=0.3
            )


async def test_headers_carry_the_bearer_token() -> None:
    seen: list[Headers] = []

    async def script(ws: ServerConnection) -> None:
        assert ws.request is not None
        seen.append(ws.request.headers)
        await ws.wait_closed()

    async with fake_agent(script) as port:
        client = await AgentClient.connect("127.0.0.1", port, TOKEN)
        await client.close()
    assert seen[0]["Authorization"] == f"Bearer {TOKEN}"
