"""``guest.pull`` against a guest that announces too much or sends too slowly: refused
before a byte is written, or ended by the pull's deadline, and nothing left on disk.

Both paths (binary messages, JSON chunks) run against a real WebSocket agent on
127.0.0.1 that lies; the host side is the real client and facade.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from adare_guest.binary_transfer import FrameKind, encode_transfer_frame
from adare_guest.protocol import Connect, ToolCall, ToolResult, encode_message, parse_message
from pytest_adare.agent import transfer
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import ToolError, VMTimeout
from pytest_adare.guest import AsyncGuest

pytestmark = pytest.mark.asyncio

BOUND = 15.0
Script = Callable[[ServerConnection, ToolCall], Coroutine[Any, Any, None]]


@asynccontextmanager
async def agent(script: Script, tools: list[str]) -> AsyncIterator[AsyncGuest]:
    async def handler(ws: ServerConnection) -> None:
        parse_message(await ws.recv())
        await ws.send(encode_message(Connect(client_info={"tools": tools})))
        answering: set[asyncio.Task[None]] = set()  # calls are answered concurrently
        try:
            async for frame in ws:
                call = parse_message(frame) if isinstance(frame, str) else None
                if isinstance(call, ToolCall):
                    answering.add(asyncio.create_task(script(ws, call)))
        finally:
            for task in answering:
                task.cancel()
            await asyncio.gather(*answering, return_exceptions=True)

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        client = await AgentClient.connect("127.0.0.1", port, None, attempts=1)
        try:
            yield AsyncGuest(client)
        finally:
            await client.close()


def binary_answer(call: ToolCall, size: int) -> str:
    params = call.params
    result = {
        "status": "success",
        "transfer_id": params["transfer_id"],
        "chunk_size": params["chunk_size"],
        "window": params["window"],
        "file_size": size,
        "is_directory": False,
    }
    return encode_message(ToolResult(call.id, True, result))


def json_chunk(call: ToolCall, size: int, data: bytes, *, last: bool) -> str:
    result: dict[str, Any] = {
        "status": "success",
        "chunk_index": call.params["chunk_index"],
        "total_chunks": max(1, -(-size // call.params["chunk_size"])),
        "file_size": size,
        "chunk_data": base64.b64encode(data).decode(),
        "is_directory": False,
    }
    if last:
        result["sha256"] = hashlib.sha256(data).hexdigest()
    return encode_message(ToolResult(call.id, True, result))


def assert_nothing_left(folder: Path) -> None:
    assert not folder.exists() or list(folder.iterdir()) == []


async def test_binary_an_announced_size_above_max_bytes_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(binary_answer(call, 2**40))

    async with agent(script, ["pull_file", "push_file"]) as guest:
        with pytest.raises(ToolError, match=r"announces 1099511627776 bytes, above max_bytes=4096"):
            await asyncio.wait_for(
                guest.pull("/big", tmp_path / "out" / "big", max_bytes=4096), BOUND
            )
    assert_nothing_left(tmp_path / "out")


async def test_json_an_announced_size_above_the_default_cap_is_refused(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(json_chunk(call, 2**40, b"x" * 16, last=False))

    async with agent(script, []) as guest:
        with pytest.raises(ToolError, match=rf"above max_bytes={transfer.DEFAULT_PULL_MAX_BYTES}"):
            await asyncio.wait_for(guest.pull("/big", tmp_path / "out" / "big"), BOUND)
    assert_nothing_left(tmp_path / "out")


async def test_binary_a_guest_that_trickles_is_ended_by_the_deadline(tmp_path: Path) -> None:
    async def script(ws: ServerConnection, call: ToolCall) -> None:
        await ws.send(binary_answer(call, 1000))
        for offset in range(1000):  # a byte every 0.2 s: each message well within its own wait
            tid = call.params["transfer_id"]
            await ws.send(encode_transfer_frame(FrameKind.DATA, tid, offset, b"x"))
            await asyncio.sleep(0.2)

    async with agent(script, ["pull_file", "push_file"]) as guest:
        started = time.monotonic()
        with pytest.raises(VMTimeout, match=r"the pull of '/slow' \(1000 bytes"):
            await asyncio.wait_for(guest.pull("/slow", tmp_path / "out" / "s", timeout=1.5), BOUND)
        assert time.monotonic() - started < 5
    assert_nothing_left(tmp_path / "out")


async def test_json_a_guest_that_trickles_is_ended_by_the_default_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "PULL_GRACE", 1.0)
    chunk = 1024

    async def script(ws: ServerConnection, call: ToolCall) -> None:
        index = call.params["chunk_index"]
        if index:
            await asyncio.sleep(60)  # a later chunk that (almost) never comes
        await ws.send(json_chunk(call, 4 * chunk, b"x" * chunk, last=False))

    async with agent(script, []) as guest:
        with pytest.raises(VMTimeout, match=r"the pull of '/slow' \(4096 bytes"):
            await asyncio.wait_for(
                guest.pull("/slow", tmp_path / "out" / "s", chunk_size=chunk), BOUND
            )
    assert_nothing_left(tmp_path / "out")
