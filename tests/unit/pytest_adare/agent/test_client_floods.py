"""The host's WebSocket client against an agent that floods and never reads.

The peer is a real server on 127.0.0.1 that does the WebSocket handshake (the
``websockets`` sans-I/O server protocol), answers ``connect``, and from then on only
writes: ping frames, JSON pings or large events, never reading a byte the host sends.
The host must neither pile up work per message nor queue without bound: it drops
such a peer, or holds one answer in flight, with an error that says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.server import ServerProtocol

from adare_guest.protocol import Connect, Event, EventType, Ping, encode_message
from pytest_adare.agent.websocket_client import MAX_WRITE_BUFFER, AgentClient
from pytest_adare.errors import AgentDisconnected, ProtocolViolation

pytestmark = pytest.mark.asyncio

BOUND = 30.0
Flood = Callable[[asyncio.StreamWriter], Awaitable[None]]


def server_frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final frame as a server sends it."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 2**16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
    return head + payload


async def _accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The handshake and the answer to the host's ``connect``; nothing read after."""
    protocol = ServerProtocol(max_size=None)
    while not (requests := protocol.events_received()):
        protocol.receive_data(await reader.read(65536))
    protocol.send_response(protocol.accept(requests[0]))  # type: ignore[arg-type]
    writer.write(b"".join(protocol.data_to_send()))
    connect_seen = False
    while not connect_seen:
        protocol.receive_data(await reader.read(65536))
        connect_seen = any(
            isinstance(e, Frame) and e.opcode is Opcode.TEXT for e in protocol.events_received()
        )
    hello = encode_message(Connect(client_info={"version": "6.6.6"})).encode()
    writer.write(server_frame(Opcode.TEXT.value, hello))
    await writer.drain()


@asynccontextmanager
async def flooding_agent(flood: Flood, **client_options: Any) -> AsyncIterator[AgentClient]:
    done = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _accept(reader, writer)
            await flood(writer)
            await done.wait()
        except (ConnectionError, OSError):
            pass  # the host dropped us: what a flood should get
        finally:
            writer.close()

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills up at once
    listener.bind(("127.0.0.1", 0))
    server = await asyncio.start_server(handler, sock=listener)
    port = listener.getsockname()[1]
    try:
        client = await AgentClient.connect("127.0.0.1", port, None, attempts=1, **client_options)
        try:
            yield client
        finally:
            done.set()
            await client.close()
    finally:
        server.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5)


async def test_a_ping_frame_flood_from_a_peer_that_never_reads_is_dropped() -> None:
    pings = server_frame(Opcode.PING.value, b"p" * 125) * 2048  # 254 KiB, 2048 pongs each

    async def flood(writer: asyncio.StreamWriter) -> None:
        for _ in range(4 * MAX_WRITE_BUFFER // len(pings)):
            writer.write(pings)
            await writer.drain()

    async with flooding_agent(flood) as client:
        started = time.monotonic()
        reason = await asyncio.wait_for(client.wait_closed(), BOUND)
        assert isinstance(reason, AgentDisconnected)
        assert "does not read what the host sends" in str(reason)
        assert f"above the host's bound of {MAX_WRITE_BUFFER}" in str(reason)
        assert time.monotonic() - started < BOUND


async def test_a_json_ping_flood_keeps_one_pong_in_flight() -> None:
    count = 100_000
    last = Event(EventType.LOG, {"message": "after the pings"})

    async def flood(writer: asyncio.StreamWriter) -> None:
        for n in range(count):
            writer.write(server_frame(Opcode.TEXT.value, encode_message(Ping(id=f"p{n}")).encode()))
            if n % 1000 == 0:
                await writer.drain()
        writer.write(server_frame(Opcode.TEXT.value, encode_message(last).encode()))
        await writer.drain()

    async with flooding_agent(flood) as client:
        seen = asyncio.Event()
        client.subscribe(lambda event: seen.set() if event.id == last.id else None)
        await asyncio.wait_for(seen.wait(), BOUND)
        tasks = len(asyncio.all_tasks())
        assert tasks < 20, f"{tasks} tasks after {count} pings (one per ping piles up)"
        assert not client.closed


async def test_large_events_faster_than_subscribers_take_them_end_the_connection() -> None:
    limit = 2**20
    big = encode_message(Event(EventType.LOG, {"message": "x" * (300 * 1024)}))

    async def handler(ws: ServerConnection) -> None:  # this one reads: it closes cleanly
        await ws.recv()
        await ws.send(encode_message(Connect(client_info={"version": "6.6.6"})))
        for _ in range(8):
            await ws.send(big)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        client = await AgentClient.connect("127.0.0.1", port, None, max_message_bytes=limit)
        stuck = asyncio.Event()

        async def never_done(event: Event) -> None:  # a subscriber that does not return
            await stuck.wait()

        client.subscribe(never_done)
        reason = await asyncio.wait_for(client.wait_closed(), BOUND)
        stuck.set()
        await client.close()
        assert isinstance(reason, ProtocolViolation)
        assert "sent events faster than they were handled" in str(reason)
        assert f"max_message_bytes={limit}" in str(reason)
