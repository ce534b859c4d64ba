"""A logged-in client that floods WebSocket pings and never reads (issue 27, item 11).

Before, every ping got its pong written into the transport's buffer, past the write
limit and past the read pause: the agent's memory grew with what the client sent.
Now at most one pong waits and the socket is not read while the buffer is full.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time

import pytest
from test_websocket_protocol import client_frame

from adare_guest.server import AdareVMServer
from adare_guest.websocket.connection import WRITE_LIMIT, ConnectionClosed, WebSocketConnection
from adare_guest.websocket.frames import Opcode
from adare_guest.websocket.server import WebSocketServer

pytestmark = pytest.mark.asyncio
FLOOD_BYTES = 64 * 1024 * 1024
"""More than the kernel's socket buffers on both sides take in."""
PONG_FRAME = 2 + 125


async def logged_in(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 101 "), head
    return reader, writer


async def flood_pings(writer: asyncio.StreamWriter) -> int:
    """Send pings (never reading) until the agent stops taking them or FLOOD_BYTES went
    out; the bytes sent."""
    sent = 0
    deadline = time.monotonic() + 20
    while sent < FLOOD_BYTES and time.monotonic() < deadline:
        batch = []
        for index in range(1000):
            payload = f"{sent:016d}-{index:04d}".encode().ljust(125, b".")
            batch.append(client_frame(Opcode.PING, payload))
        data = b"".join(batch)
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), 1.0)
        except asyncio.TimeoutError:
            break  # the agent stopped reading: what the fix does
        sent += len(data)
    return sent


def agent_write_buffer(agent: AdareVMServer) -> int:
    assert agent._server is not None
    (connection,) = agent._server.connections
    return connection.transport.get_write_buffer_size()


async def test_a_ping_flood_that_never_reads_leaves_at_most_one_pong_waiting(
    agent: AdareVMServer,
) -> None:
    assert agent.listen_address is not None
    reader, writer = await logged_in(agent.listen_address[1])
    try:
        flood = asyncio.ensure_future(flood_pings(writer))
        peak = 0
        while not flood.done():
            await asyncio.sleep(0.01)
            if agent._server is not None and agent._server.connections:
                peak = max(peak, agent_write_buffer(agent))
        sent = await flood
        peak = max(peak, agent_write_buffer(agent))
        # The welcome event, the pongs up to the limit, and one more frame at most.
        assert peak <= WRITE_LIMIT + 1024 + PONG_FRAME, f"{peak} bytes buffered"
        assert sent < FLOOD_BYTES, "the agent read every ping: it never stopped reading"

        # Once the client reads, the flood's last ping is answered and the session works.
        writer.write(client_frame(Opcode.PING, b"probe"))
        call = {"type": "tool_call", "id": "after", "timestamp": None, "tool": "get_status"}
        writer.write(client_frame(Opcode.TEXT, json.dumps({**call, "params": {}}).encode()))
        pongs: list[bytes] = []
        answered = False
        while not (answered and b"probe" in pongs):
            opcode, payload = await next_frame(reader)
            if opcode == Opcode.PONG:
                pongs.append(payload)
            answered |= opcode == Opcode.TEXT and b'"tool_result"' in payload
    finally:
        writer.close()


async def next_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """``(opcode, payload)`` of the server's next (unmasked) frame."""
    head = await asyncio.wait_for(reader.readexactly(2), 30)
    size = head[1] & 0x7F
    extra = await reader.readexactly({126: 2, 127: 8}.get(size, 0))
    length = int.from_bytes(extra, "big") if extra else size
    return head[0] & 0x0F, await reader.readexactly(length)


async def test_while_a_big_message_drains_the_client_is_read_until_a_pong_must_wait() -> None:
    received: list[str | bytes] = []
    arrived = asyncio.Event()

    async def handler(connection: WebSocketConnection) -> None:
        sending = asyncio.ensure_future(connection.send(b"x" * (16 * 1024 * 1024)))
        async for message in connection:
            received.append(message)
            arrived.set()
        with contextlib.suppress(ConnectionClosed):  # the client leaves without reading
            await sending

    server = WebSocketServer(handler, max_size=1 << 20, ping_interval=None)
    await server.listen("127.0.0.1", 0)
    reader, writer = await logged_in(server.sockets[0].getsockname()[1])
    try:

        async def delivered(count: int) -> bool:
            while len(received) < count:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), 1.0)
                except asyncio.TimeoutError:
                    return False
            return True

        # The client reads nothing: the 16 MiB message fills the write buffer.
        writer.write(client_frame(Opcode.TEXT, b"call while it drains"))
        assert await delivered(1), "a client that does not ping must still be read"
        writer.write(client_frame(Opcode.PING, b"now a pong must wait"))
        await asyncio.sleep(0.3)  # one read each: a read's frames are parsed together
        writer.write(client_frame(Opcode.TEXT, b"after the ping"))
        assert not await delivered(2), "read on although a pong waits"
        # Once the client reads, the pong goes out and reading goes on.
        while (frame := await next_frame(reader))[0] != Opcode.PONG:
            pass
        assert frame[1] == b"now a pong must wait"
        assert await delivered(2) and received[1] == "after the ping"
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
