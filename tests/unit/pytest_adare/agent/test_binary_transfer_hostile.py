"""Binary transfers against a hostile agent: lies end the transfer, never the host's disk.

The peer is a real WebSocket server on 127.0.0.1 that offers ``pull_file`` and
``push_file`` and then sends what malware owning the guest could: sizes that lie, bytes
beyond the announced size, messages for a transfer id the host never opened, more data
messages than the window allows, a missing or wrong final hash, acknowledgements of
bytes never sent. The host side is the real client and the real
:mod:`pytest_adare.agent.transfer`; each scenario is bounded by :data:`BOUND` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from adare_guest.binary_transfer import FrameKind, encode_transfer_frame, parse_transfer_frame
from adare_guest.protocol import Connect, ToolCall, ToolResult, encode_message, parse_message
from pytest_adare.agent import transfer
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import ProtocolViolation, ToolError, VMTimeout
from pytest_adare.guest import AsyncGuest

pytestmark = pytest.mark.asyncio

BOUND = 15.0
CONTENT = b"0123456789"
Script = Callable[[ServerConnection, ToolCall], Awaitable[None]]


def answer(call: ToolCall, **fields: Any) -> str:
    params = call.params
    result = {
        "status": "success",
        "transfer_id": params["transfer_id"],
        "chunk_size": params["chunk_size"],
        "window": params["window"],
        "file_size": len(CONTENT),
        "is_directory": False,
        **fields,
    }
    return encode_message(ToolResult(call.id, True, result))


def data(call: ToolCall, offset: int, payload: bytes, transfer_id: int | None = None) -> bytes:
    tid = call.params["transfer_id"] if transfer_id is None else transfer_id
    return encode_transfer_frame(FrameKind.DATA, tid, offset, payload)


def end(call: ToolCall, size: int, digest: bytes) -> bytes:
    return encode_transfer_frame(FrameKind.END, call.params["transfer_id"], size, digest)


SHA = hashlib.sha256(CONTENT).digest()


@asynccontextmanager
async def hostile_agent(script: Script) -> AsyncIterator[tuple[AsyncGuest, list[bytes]]]:
    """A guest facade on an agent that offers the binary tools and runs ``script`` for
    each of their calls (``get_timestamp`` is answered honestly). Yields the facade and
    the binary messages the host sent."""
    received: list[bytes] = []

    async def handler(ws: ServerConnection) -> None:
        parse_message(await ws.recv())
        tools = ["pull_file", "push_file", "get_timestamp"]
        await ws.send(encode_message(Connect(client_info={"tools": tools})))
        async for frame in ws:
            if isinstance(frame, bytes):
                received.append(frame)
                continue
            call = parse_message(frame)
            if isinstance(call, ToolCall) and call.tool == "get_timestamp":
                await ws.send(encode_message(ToolResult(call.id, True, {"timestamp": 1.0})))
            elif isinstance(call, ToolCall):
                await script(ws, call)

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        client = await AgentClient.connect("127.0.0.1", port, None, attempts=1)
        try:
            yield AsyncGuest(client), received
        finally:
            await client.close()


async def pull_refused(
    script: Script, tmp_path: Path, error: type[Exception], match: str
) -> list[bytes]:
    """Pull under ``script``: it must fail with ``error``, leave nothing on disk, and the
    connection must stay usable. The host's binary messages are returned."""
    async with hostile_agent(script) as (guest, received):
        with pytest.raises(error, match=match):
            await asyncio.wait_for(guest.pull("/evidence", tmp_path / "out" / "x"), BOUND)
        assert list((tmp_path / "out").glob("*")) == []
        assert (await asyncio.wait_for(guest.call("get_timestamp"), BOUND))["timestamp"] == 1.0
        return received


async def test_an_honest_agent_pulls_bit_exact_and_is_acknowledged(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT[:6]))
        await ws.send(data(call, 6, CONTENT[6:]))
        await ws.send(end(call, len(CONTENT), SHA))

    async with hostile_agent(script) as (guest, received):
        out = await asyncio.wait_for(guest.pull("/evidence", tmp_path / "x"), BOUND)
        assert out.read_bytes() == CONTENT
    acks = [parse_transfer_frame(m) for m in received]  # all read once the client closed
    assert [(f.kind, f.offset) for f in acks] == [(FrameKind.ACK, 6), (FrameKind.ACK, 10)]


async def test_more_bytes_than_announced_are_refused_before_writing(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call, file_size=4))
        await ws.send(data(call, 0, CONTENT))

    received = await pull_refused(script, tmp_path, ToolError, "10 bytes at offset 0.*4 bytes")
    assert parse_transfer_frame(received[-1]).kind is FrameKind.CANCEL


async def test_extra_bytes_after_the_announced_size_are_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT))
        await ws.send(data(call, 10, b"more"))

    await pull_refused(script, tmp_path, ToolError, "4 bytes at offset 10")


async def test_a_gap_in_the_offsets_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 5, CONTENT[5:]))

    await pull_refused(script, tmp_path, ToolError, "at offset 5, but 0")


async def test_an_announcement_for_another_transfer_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call, transfer_id=call.params["transfer_id"] ^ 1))

    await pull_refused(script, tmp_path, ToolError, "announcement")


async def test_a_negative_or_non_integer_size_is_refused(tmp_path: Path) -> None:
    for size in (-1, 1e30, "10"):

        async def script(ws: ServerConnection, call: ToolCall, size: Any = size) -> None:
            await ws.send(answer(call, file_size=size))

        await pull_refused(script, tmp_path, ToolError, "announcement")


async def test_data_for_a_transfer_the_host_never_opened_ends_the_connection(
    tmp_path: Path,
) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(data(call, 0, CONTENT, transfer_id=call.params["transfer_id"] ^ 1))

    async with hostile_agent(script) as (guest, _received):
        with pytest.raises(ProtocolViolation, match="never opened"):
            await asyncio.wait_for(guest.pull("/evidence", tmp_path / "x"), BOUND)
        assert guest.connection.closed  # type: ignore[attr-defined]
    assert os.listdir(tmp_path) == []


async def test_more_data_messages_than_the_window_fail_the_transfer(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        # All before the announcement: the host has acknowledged none of them.
        for offset in range(call.params["window"] + 1):
            await ws.send(data(call, offset, CONTENT[offset : offset + 1]))
        await ws.send(answer(call))

    window = f"unacknowledged \\(window {transfer.BINARY_PULL_WINDOW}\\)"
    await pull_refused(script, tmp_path, ProtocolViolation, window)


async def test_a_data_message_above_the_chunk_size_fails_the_transfer(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, bytes(call.params["chunk_size"] + 1)))

    await pull_refused(script, tmp_path, ProtocolViolation, "chunk size")


async def test_an_end_without_the_hash_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT))
        await ws.send(end(call, len(CONTENT), b""))

    await pull_refused(script, tmp_path, ToolError, "0-byte hash")


async def test_a_wrong_hash_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT))
        await ws.send(end(call, len(CONTENT), hashlib.sha256(b"other").digest()))

    await pull_refused(script, tmp_path, ToolError, "sha256 mismatch")


async def test_an_early_end_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT[:4]))
        await ws.send(end(call, 4, hashlib.sha256(CONTENT[:4]).digest()))

    await pull_refused(script, tmp_path, ToolError, "after 4 of 10 bytes")


async def test_no_end_at_all_times_out_saying_what_it_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "BINARY_FRAME_TIMEOUT", 0.5)

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(data(call, 0, CONTENT))

    await pull_refused(script, tmp_path, VMTimeout, "10 of 10 bytes in")


async def test_a_cancel_from_the_agent_names_its_reason(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        tid = call.params["transfer_id"]
        await ws.send(encode_transfer_frame(FrameKind.CANCEL, tid, 0, b"disk on fire"))

    await pull_refused(script, tmp_path, ToolError, "disk on fire")


async def test_a_push_acknowledged_beyond_what_was_sent_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_bytes(CONTENT)

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        await ws.send(encode_transfer_frame(FrameKind.ACK, call.params["transfer_id"], 10**9))
        await ws.send(end(call, len(CONTENT), SHA))

    async with hostile_agent(script) as (guest, _received):
        with pytest.raises(ToolError, match="acknowledged offset 1000000000"):
            await asyncio.wait_for(guest.push(source, "/g"), BOUND)


async def test_a_push_confirmed_with_another_hash_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.write_bytes(CONTENT)

    host_sent: list[bytes] = []

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(answer(call))
        host_sent.append(await ws.recv(decode=False))  # the data
        tid = call.params["transfer_id"]
        await ws.send(encode_transfer_frame(FrameKind.ACK, tid, len(CONTENT)))
        host_sent.append(await ws.recv(decode=False))  # the end
        await ws.send(end(call, len(CONTENT), hashlib.sha256(b"x").digest()))

    async with hostile_agent(script) as (guest, received):
        with pytest.raises(ToolError, match="confirmed 10 bytes with sha256"):
            await asyncio.wait_for(guest.push(source, "/g"), BOUND)
    frames = [parse_transfer_frame(m) for m in host_sent + received]
    assert [f.kind for f in frames] == [FrameKind.DATA, FrameKind.END, FrameKind.CANCEL]
    assert frames[0].payload == CONTENT and frames[1].payload == SHA
