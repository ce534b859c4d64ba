"""The host's agent clients against a hostile agent: every attack ends in a clear error.

The peers are real servers on this machine (a WebSocket server on 127.0.0.1, a Unix
socket speaking the serial link through the guest's own :class:`GuestLink`) that send
what malware owning the guest could: nested JSON, huge messages, wrong ids, no answer
at all, a connection cut mid-frame, chunks and fragments that lie about their sizes
(path tricks against pulled evidence: ``test_evidence_hostile_agent.py``). The host
side is the real client. Each scenario is bounded by
:data:`BOUND` seconds, far below the calls' own timeouts, so a client that hangs
fails the test instead of passing slowly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from adare_guest.protocol import Connect, ToolCall, ToolResult, encode_message, parse_message
from adare_guest.serial.link import (
    POLL_CHUNK,
    Fragment,
    GuestLink,
    MessageReceived,
    PollFlag,
)
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentDisconnected, ProtocolViolation, ToolError, VMTimeout
from pytest_adare.guest import AsyncGuest

pytestmark = pytest.mark.asyncio

BOUND = 15.0
"""Seconds any scenario may take; the calls themselves would wait 300 s by default."""
Script = Callable[[ServerConnection, ToolCall], Awaitable[None]]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def result_text(call_id: str, result: Any) -> str:
    return encode_message(ToolResult(call_id, True, result))


@asynccontextmanager
async def hostile_websocket(script: Script, **client_options: Any) -> AsyncIterator[AgentClient]:
    """A connected client whose agent answers ``connect`` properly, then runs ``script``
    for every tool call."""

    async def handler(ws: ServerConnection) -> None:
        parse_message(await ws.recv())
        await ws.send(encode_message(Connect(client_info={"version": "6.6.6"})))
        async for frame in ws:
            call = parse_message(frame)
            if isinstance(call, ToolCall):
                await script(ws, call)

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        client = await AgentClient.connect("127.0.0.1", port, None, attempts=1, **client_options)
        try:
            yield client
        finally:
            await client.close()


async def bounded(awaitable: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(awaitable, BOUND)


async def test_nested_json_fails_every_pending_call_at_once_and_closes() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        if call.tool == "bomb":
            await ws.send(nested(100_000))

    async with hostile_websocket(script) as client:
        waiting = asyncio.ensure_future(client.call("slow", timeout=300))
        await asyncio.sleep(0)
        with pytest.raises(ProtocolViolation, match="nests 100000 levels deep"):
            await bounded(client.call("bomb", timeout=300))
        with pytest.raises(ProtocolViolation, match="'slow' got no answer"):
            await bounded(waiting)
        assert client.closed
        with pytest.raises(AgentDisconnected, match="cannot call 'next'"):
            await bounded(client.call("next"))


async def test_a_broken_answer_to_one_call_fails_only_that_call() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        if call.tool == "deep":  # its own id, a result nested past the limit
            body = f'{{"a": {nested(5000)}}}'
            await ws.send(result_text(call.id, {}).replace('"result":{}', f'"result":{body}'))
        elif call.tool == "typed":  # its own id, success is not a boolean
            await ws.send(result_text(call.id, {}).replace('"success":true', '"success":1'))
        else:
            await ws.send(result_text(call.id, {"status": "success", "echo": call.tool}))

    async with hostile_websocket(script) as client:
        with pytest.raises(ProtocolViolation, match=r"'deep'.*nests"):
            await bounded(client.call("deep"))
        with pytest.raises(ProtocolViolation, match=r"'typed'.*success"):
            await bounded(client.call("typed"))
        assert not client.closed
        assert await bounded(client.call("fine")) == {"status": "success", "echo": "fine"}


async def test_a_message_above_max_message_bytes_is_refused_by_name() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(result_text(call.id, {"status": "success", "data": "A" * 200_000}))

    async with hostile_websocket(script, max_message_bytes=64 * 1024) as client:
        assert client.max_message_bytes == 64 * 1024
        with pytest.raises(ProtocolViolation, match="max_message_bytes=65536"):
            await bounded(client.call("flood", timeout=300))
        assert client.closed


async def test_the_default_bound_lets_a_large_honest_answer_through() -> None:
    payload = "B" * (20 * 1024 * 1024)  # more than the old 16 MiB host→guest limit

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(result_text(call.id, {"status": "success", "data": payload}))

    async with hostile_websocket(script) as client:
        assert (await bounded(client.call("big")))["data"] == payload


async def test_answers_under_wrong_ids_end_in_a_timeout_naming_the_tool() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(result_text("not-" + call.id, {"status": "success"}))

    async with hostile_websocket(script) as client:
        with pytest.raises(VMTimeout, match="answer to 'liar'"):
            await bounded(client.call("liar", timeout=1.0))
        assert not client.closed


async def test_an_agent_that_never_answers_ends_in_the_callers_timeout() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        return None

    async with hostile_websocket(script) as client:
        with pytest.raises(VMTimeout, match=r"timed out after 0\.5 s.*'mute'"):
            await bounded(client.call("mute", timeout=0.5))


async def test_a_connection_cut_mid_frame_fails_the_call_at_once() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        # A text frame header announcing 4096 bytes, 10 of them, then the socket dies.
        ws.transport.write(b"\x81\x7e\x10\x00" + b'{"type": "')
        ws.transport.abort()

    async with hostile_websocket(script) as client:
        with pytest.raises(AgentDisconnected, match="'cut' got no answer"):
            await bounded(client.call("cut", timeout=300))
        assert client.closed


async def test_a_binary_frame_that_is_no_transfer_message_is_a_protocol_violation() -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(b"\x00\x01")

    async with hostile_websocket(script) as client:
        with pytest.raises(ProtocolViolation, match="invalid binary message"):
            await bounded(client.call("bin", timeout=300))


async def test_lying_chunk_sizes_leave_no_file_and_the_connection_usable(tmp_path: Path) -> None:
    answers: dict[str, dict[str, Any]] = {
        "/etc/../../../../tmp/x": {"chunk_index": 0, "total_chunks": 10**30, "file_size": 1},
        "/home/../../y": {"chunk_index": 0, "total_chunks": 1, "file_size": 3,
                          "chunk_data": "QUFBQUFBQUFBQUFB"},  # 12 bytes for a 3-byte file
        "/z": {"chunk_index": 0, "total_chunks": 1e400, "file_size": 1},
        "/w": {"chunk_index": 0, "total_chunks": 1, "file_size": 1, "chunk_data": [1, 2]},
    }  # fmt: skip

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        answer = {"status": "success", "is_directory": False, **answers[call.params["guest_path"]]}
        text = json.dumps({**json.loads(result_text(call.id, {})), "result": answer})
        await ws.send(text.replace("Infinity", "1e400"))  # read back as float('inf')

    inside = tmp_path / "inside"
    async with hostile_websocket(script) as client:
        guest = AsyncGuest(client)
        for guest_path in answers:
            with pytest.raises(ToolError, match="pull_file_chunk"):
                await bounded(guest.pull(guest_path, inside / "file"))
        assert not client.closed
    assert not inside.exists() or not any(inside.iterdir())


# -- the serial link ----------------------------------------------------------------------


class LyingLink(GuestLink):
    """The guest's real link layer, except that once ``lie`` is set its POLL answers
    carry the fragment ``lie`` makes instead of the queued message."""

    lie: Callable[[int], Fragment] | None = None
    polls = 0

    def _next_fragment(self) -> bytes:
        if self.lie is None:
            return super()._next_fragment()
        fragment, self.polls = self.lie(self.polls), self.polls + 1
        return bytes((PollFlag.DATA,)) + fragment.encode()


@asynccontextmanager
async def hostile_serial(
    tmp_path: Path, **client_options: Any
) -> AsyncIterator[tuple[SerialAgentClient, LyingLink]]:
    link = LyingLink(lambda: {"listening": False})
    path = str(tmp_path / "agent-serial.sock")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            link.receive_data(data)
            for event in link.events_received():
                if isinstance(event, MessageReceived):
                    message = parse_message(event.text)
                    if isinstance(message, Connect):
                        link.queue_message(encode_message(Connect(client_info={})))
            writer.write(link.data_to_send())
        writer.close()

    server = await asyncio.start_unix_server(handler, path)
    try:
        client = await SerialAgentClient.connect(path, timeout=BOUND, **client_options)
        try:
            yield client, link
        finally:
            await client.close()
    finally:
        server.close()


async def test_serial_a_fragment_announcing_too_much_is_refused_by_name(tmp_path: Path) -> None:
    async with hostile_serial(tmp_path, max_message_bytes=1024 * 1024) as (client, link):
        link.lie = lambda _: Fragment(2**31, 0, b"{" * POLL_CHUNK)
        with pytest.raises(AgentDisconnected, match="max_message_bytes=1048576"):
            await bounded(client.call("flood", timeout=300))
        assert client.closed


async def test_serial_a_message_that_changes_its_size_midway_ends_the_link(
    tmp_path: Path,
) -> None:
    def shifting(poll: int) -> Fragment:
        return Fragment(2000 + poll * 1000, poll * 500, b"x" * 500)

    async with hostile_serial(tmp_path) as (client, link):
        link.lie = shifting
        with pytest.raises(AgentDisconnected, match="size changed from 2000 to 3000"):
            await bounded(client.call("shifty", timeout=300))
        assert client.closed


async def test_serial_nested_json_fails_pending_calls_at_once(tmp_path: Path) -> None:
    bomb = nested(50_000).encode()

    def piece(poll: int) -> Fragment:
        start = poll * POLL_CHUNK
        return Fragment(len(bomb), start, bomb[start : start + POLL_CHUNK])

    async with hostile_serial(tmp_path) as (client, link):
        link.lie = piece
        with pytest.raises(AgentDisconnected, match="nests 50000 levels deep"):
            await bounded(client.call("bomb", timeout=300))
        assert client.closed
