"""The agent's own WebSocket server against the real ``websockets`` client (interop) and
against a raw TCP client that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from test_websocket_protocol import client_frame
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus
from websockets.frames import Frame
from websockets.frames import Opcode as RefOpcode
from websockets.streams import StreamReader

from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer
from adare_guest.websocket.connection import (
    MAX_QUEUE_BYTES,
    ConnectionClosed,
    WebSocketConnection,
)
from adare_guest.websocket.frames import Opcode
from adare_guest.websocket.server import WebSocketServer

pytestmark = pytest.mark.asyncio
WAIT = 10.0

Handler = Callable[[WebSocketConnection], Awaitable[None]]
Starter = Callable[..., Awaitable[WebSocketServer]]


class Recorder:
    """A handler that echoes every message and keeps its connections."""

    def __init__(self) -> None:
        self.connections: list[WebSocketConnection] = []
        self.received: list[str | bytes] = []
        self.ended = asyncio.Event()
        self.connected = asyncio.Event()

    async def echo(self, connection: WebSocketConnection) -> None:
        self.connections.append(connection)
        self.connected.set()
        try:
            async for message in connection:
                self.received.append(message)
                await connection.send(message)
        finally:
            self.ended.set()

    async def connection(self) -> WebSocketConnection:
        await asyncio.wait_for(self.connected.wait(), WAIT)
        return self.connections[-1]


@pytest_asyncio.fixture
async def start_server() -> AsyncIterator[Starter]:
    """Start servers on 127.0.0.1:<free port>; all are closed afterwards."""
    servers: list[WebSocketServer] = []

    async def start(handler: Handler, **options: Any) -> WebSocketServer:
        options.setdefault("max_size", 1 << 20)
        server = WebSocketServer(handler, **options)
        await server.listen("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 30)


def url(server: WebSocketServer) -> str:
    return f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def connected(server: WebSocketServer, **options: Any) -> ClientConnection:
    options.setdefault("max_size", None)
    return await connect(url(server), **options)


# --------------------------------------------------------------------------- raw client

KEY = base64.b64encode(os.urandom(16)).decode()


def upgrade_request(port: int, extra: str = "", version: str = "13") -> bytes:
    return (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\n"
        f"Sec-WebSocket-Version: {version}\r\n{extra}\r\n"
    ).encode()


class RawClient:
    """A TCP client that speaks only what a test makes it say (it never answers a ping)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, server: WebSocketServer, first: bytes | None = None) -> RawClient:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(upgrade_request(port) if first is None else first)
        return cls(reader, writer)

    @classmethod
    async def upgraded(cls, server: WebSocketServer, after: bytes = b"") -> RawClient:
        port = server.sockets[0].getsockname()[1]
        client = await cls.open(server, upgrade_request(port) + after)
        head = await asyncio.wait_for(client.reader.readuntil(b"\r\n\r\n"), WAIT)
        assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n"), head
        return client

    async def next_frame(self) -> Frame:
        head = await asyncio.wait_for(self.reader.readexactly(2), WAIT)
        size = head[1] & 0x7F
        extra = await self.reader.readexactly({126: 2, 127: 8}.get(size, 0))
        length = int.from_bytes(extra, "big") if extra else size
        payload = await self.reader.readexactly(length)
        (frame,) = server_frames(head + extra + payload)
        return frame

    async def rest(self) -> bytes:
        """Everything the server sends until it closes the connection."""
        return await asyncio.wait_for(self.reader.read(), WAIT)

    async def frames_until_eof(self) -> list[Frame]:
        return server_frames(await self.rest())

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


def server_frames(data: bytes) -> list[Frame]:
    """Server frames parsed by the websockets library (unmasked, as it insists)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = []
    while reader.buffer:
        parser = Frame.parse(reader.read_exact, mask=False, max_size=None, extensions=None)
        try:
            next(parser)
        except StopIteration as done:
            frames.append(done.value)
        else:
            raise AssertionError(f"incomplete frame at the end: {bytes(reader.buffer)!r}")
    return frames


def close_code(frame: Frame) -> int:
    assert frame.opcode == RefOpcode.CLOSE
    return int.from_bytes(frame.data[:2], "big")


@pytest_asyncio.fixture
async def raw_clients() -> AsyncIterator[list[RawClient]]:
    clients: list[RawClient] = []
    yield clients
    for client in clients:
        await client.close()


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 300_000])
async def test_text_and_binary_messages_round_trip(start_server: Starter, size: int) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo)
    text, blob = "é" * (size // 2) + "x" * (size % 2), os.urandom(size)
    async with await connected(server) as ws:
        await ws.send(text)
        assert await ws.recv() == text
        await ws.send(blob)
        echoed = await ws.recv()
        assert isinstance(echoed, bytes) and echoed == blob
    assert recorder.received == [text, blob]


async def test_fragmented_messages_from_the_client_are_joined(start_server: Starter) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo)
    async with await connected(server) as ws:
        await ws.send(["héllo ", "", "wörld"])  # websockets sends an iterable as fragments
        assert await ws.recv() == "héllo wörld"
        await ws.send([b"\x00ab", b"cd", b""])
        assert await ws.recv() == b"\x00abcd"
    assert recorder.received == ["héllo wörld", b"\x00abcd"]


async def test_frames_sent_with_the_handshake_are_not_lost(
    start_server: Starter, raw_clients: list[RawClient]
) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo)
    early = client_frame(Opcode.TEXT, b"early") + client_frame(Opcode.PING, b"p")
    raw_clients.append(client := await RawClient.upgraded(server, early))
    pong, echoed = await client.next_frame(), await client.next_frame()
    assert (pong.opcode, pong.data) == (RefOpcode.PONG, b"p")
    assert (echoed.opcode, echoed.data) == (RefOpcode.TEXT, b"early")
    client.writer.write(client_frame(Opcode.CLOSE, b"\x03\xe8"))
    frames = await client.frames_until_eof()
    assert [close_code(f) for f in frames] == [1000]


async def test_the_client_s_pings_are_answered_even_while_the_handler_is_busy(
    start_server: Starter,
) -> None:
    release = asyncio.Event()

    async def busy(connection: WebSocketConnection) -> None:
        await release.wait()

    server = await start_server(busy)
    async with await connected(server) as ws:
        began = time.monotonic()
        pong = await ws.ping(b"probe")
        latency = await asyncio.wait_for(pong, WAIT)
        assert 0 < latency <= time.monotonic() - began  # a real round trip, not a stub
        release.set()


async def test_keepalive_pings_a_client_that_answers_and_keeps_it(start_server: Starter) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo, ping_interval=0.1, ping_timeout=2)
    async with await connected(server) as ws:
        connection = await recorder.connection()
        await asyncio.sleep(0.8)
        assert connection.latency is not None and not connection.closed
        await ws.send("still here")
        assert await ws.recv() == "still here"


async def test_a_client_that_does_not_answer_pings_is_dropped_with_1011(
    start_server: Starter, raw_clients: list[RawClient]
) -> None:
    recorder = Recorder()
    server = await start_server(
        recorder.echo, ping_interval=0.2, ping_timeout=0.3, close_timeout=0.5
    )
    started = time.monotonic()
    raw_clients.append(client := await RawClient.upgraded(server))
    frames = await client.frames_until_eof()
    assert time.monotonic() - started < 5
    assert frames[0].opcode == RefOpcode.PING and len(frames[0].data) == 4
    assert close_code(frames[-1]) == 1011 and b"keepalive" in frames[-1].data
    await asyncio.wait_for(recorder.ended.wait(), WAIT)
    assert recorder.connections[0].close_code == 1006  # the client never sent a close


# --------------------------------------------------------------------------- violations


async def test_a_message_over_max_size_closes_with_1009(start_server: Starter) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo, max_size=1000)
    async with await connected(server) as ws:
        await ws.send(b"x" * 1000)
        assert await ws.recv() == b"x" * 1000
        await ws.send(b"x" * 1001)
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert recorder.received == [b"x" * 1000]


async def test_fragments_adding_up_over_max_size_close_with_1009(start_server: Starter) -> None:
    server = await start_server(Recorder().echo, max_size=1000)
    async with await connected(server) as ws:
        await ws.send(["x" * 600, "x" * 600])
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (client_frame(Opcode.TEXT, b"not \xff utf-8"), 1007),
        (client_frame(Opcode.TEXT, b"unmasked", masked=False), 1002),
        (client_frame(Opcode.TEXT, b"rsv", rsv=4), 1002),
        (client_frame(0x3, b"opcode 3"), 1002),
        (client_frame(Opcode.PING, b"x" * 126), 1002),
        (client_frame(Opcode.CONTINUATION, b"nothing to continue"), 1002),
        (client_frame(Opcode.CLOSE, b"\x03\xed"), 1002),  # 1005 may not be sent
    ],
    ids=["utf-8", "unmasked", "rsv", "opcode", "long-ping", "continuation", "close-code"],
)
async def test_a_protocol_violation_closes_with_its_code_and_ends_the_handler(
    start_server: Starter, raw_clients: list[RawClient], frame: bytes, code: int
) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo, close_timeout=0.5)
    raw_clients.append(client := await RawClient.upgraded(server, frame))
    frames = await client.frames_until_eof()
    assert [close_code(f) for f in frames] == [code]
    await asyncio.wait_for(recorder.ended.wait(), WAIT)
    assert recorder.received == []


# --------------------------------------------------------------------------- closing


async def test_the_client_closes_and_the_server_answers_at_once(start_server: Starter) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo)
    ws = await connected(server)
    connection = await recorder.connection()
    started = time.monotonic()
    await ws.close(4000, "bye")
    assert time.monotonic() - started < 2  # the server answered; no timeout ran out
    assert ws.close_code == 4000  # the server echoed the client's code
    await asyncio.wait_for(recorder.ended.wait(), WAIT)
    assert (connection.close_code, connection.close_reason) == (4000, "bye")
    await asyncio.wait_for(connection.wait_closed(), WAIT)
    with pytest.raises(ConnectionClosed) as refused:
        await connection.send("too late")
    assert refused.value.code == 4000
    with pytest.raises(ConnectionClosed):
        await connection.recv()


async def test_the_server_closes_with_its_code_and_reason(start_server: Starter) -> None:
    finished = asyncio.Event()
    took: list[float] = []

    async def closer(connection: WebSocketConnection) -> None:
        await connection.send("last words")
        started = time.monotonic()
        await connection.close(4001, "done")
        took.append(time.monotonic() - started)
        finished.set()

    server = await start_server(closer, close_timeout=10)
    async with await connected(server) as ws:
        assert await ws.recv() == "last words"
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4001, "done")
    await asyncio.wait_for(finished.wait(), WAIT)
    assert took[0] < 2  # the client answered the close: no 10 s timeout


async def test_a_client_that_does_not_answer_the_close_is_cut_off(
    start_server: Starter, raw_clients: list[RawClient]
) -> None:
    took: list[float] = []

    async def closer(connection: WebSocketConnection) -> None:
        started = time.monotonic()
        await connection.close()
        took.append(time.monotonic() - started)

    server = await start_server(closer, close_timeout=0.5)
    raw_clients.append(client := await RawClient.upgraded(server))
    frames = await client.frames_until_eof()
    assert [close_code(f) for f in frames] == [1000]
    assert 0.4 < took[0] < 3


async def test_a_handler_that_returns_closes_with_1000_and_one_that_raises_with_1011(
    start_server: Starter, caplog: pytest.LogCaptureFixture
) -> None:
    async def returns(connection: WebSocketConnection) -> None:
        return None

    async def raises(connection: WebSocketConnection) -> None:
        raise RuntimeError("handler exploded")

    polite, broken = await start_server(returns), await start_server(raises)
    async with await connected(polite) as ws:
        with pytest.raises(ConnectionClosedOK) as ok:
            await ws.recv()
    assert ok.value.rcvd is not None and ok.value.rcvd.code == 1000
    with caplog.at_level(logging.ERROR, logger="adare_guest.websocket"):
        async with await connected(broken) as ws:
            with pytest.raises(ConnectionClosedError) as error:
                await ws.recv()
    assert error.value.rcvd is not None and error.value.rcvd.code == 1011
    assert any("handler exploded" in str(r.exc_info) for r in caplog.records)


async def test_closing_the_server_closes_connections_with_1001_and_stops_listening(
    start_server: Starter,
) -> None:
    recorder = Recorder()
    server = await start_server(recorder.echo)
    address = url(server)
    ws = await connected(server)
    await recorder.connection()
    server.close()
    await asyncio.wait_for(server.wait_closed(), WAIT)
    with pytest.raises(ConnectionClosedOK) as closed:
        await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    assert recorder.ended.is_set() and server.connections == set()
    with pytest.raises(OSError):
        await connect(address, open_timeout=WAIT)


# --------------------------------------------------------------------------- backpressure


async def test_send_waits_while_the_client_does_not_read(start_server: Starter) -> None:
    """A client that stops reading blocks ``send`` (what backpressure.py times)."""
    outcome: dict[str, int] = {}

    async def flood(connection: WebSocketConnection) -> None:
        chunk, sent = os.urandom(256 * 1024), 0
        try:
            while sent < 256 * 2**20:
                await asyncio.wait_for(connection.send(chunk), 1.0)
                sent += len(chunk)
        except asyncio.TimeoutError:
            outcome["sent"] = sent
        connection.abort()

    server = await start_server(flood, close_timeout=0.5)
    ws = await connected(server)
    ws.transport.pause_reading()
    try:
        for _ in range(200):
            if "sent" in outcome:
                break
            await asyncio.sleep(0.05)
        assert 0 < outcome["sent"] < 64 * 2**20  # kernel buffers, not 256 MiB
    finally:
        ws.transport.abort()


async def test_closing_the_server_does_not_wait_for_a_client_that_does_not_read(
    start_server: Starter,
) -> None:
    blocked = asyncio.Event()

    async def flood(connection: WebSocketConnection) -> None:
        chunk = os.urandom(1 << 20)
        try:
            while True:
                send = asyncio.ensure_future(connection.send(chunk))
                done, _ = await asyncio.wait({send}, timeout=0.5)
                if not done:
                    blocked.set()
                    await send
        except ConnectionClosed:
            pass

    server = await start_server(flood, close_timeout=0.5)
    ws = await connected(server)
    ws.transport.pause_reading()
    try:
        await asyncio.wait_for(blocked.wait(), WAIT)
        started = time.monotonic()
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)
        assert time.monotonic() - started < 3
    finally:
        ws.transport.abort()


async def test_a_handler_that_does_not_read_stops_the_reading_of_the_socket(
    start_server: Starter,
) -> None:
    release = asyncio.Event()
    recorder = Recorder()
    waiting: list[WebSocketConnection] = []

    async def slow(connection: WebSocketConnection) -> None:
        waiting.append(connection)
        await release.wait()
        await recorder.echo(connection)

    server = await start_server(slow, max_size=2 << 20)
    ws = await connected(server)
    sent = 0
    try:
        while sent < 256:
            await asyncio.wait_for(ws.send(sent.to_bytes(4, "big") + bytes(1 << 20)), 2.0)
            sent += 1
    except asyncio.TimeoutError:
        pass
    assert sent < 128, "the server kept reading what its handler did not take"
    (connection,) = waiting
    assert 0 < connection.queued_bytes <= MAX_QUEUE_BYTES + (2 << 20)
    release.set()
    for index in range(sent):
        echoed = await asyncio.wait_for(ws.recv(), WAIT)
        assert echoed[:4] == index.to_bytes(4, "big") and len(echoed) == 4 + (1 << 20)
    await ws.close()


# --------------------------------------------------------------------------- handshake


async def http_exchange(server: WebSocketServer, request: bytes) -> tuple[str, list[str], str]:
    """Send ``request`` raw; the status line, headers and body of the answer (then EOF)."""
    client = await RawClient.open(server, request)
    try:
        answer = (await client.rest()).decode("latin-1")
    finally:
        await client.close()
    head, _, body = answer.partition("\r\n\r\n")
    status, *headers = head.split("\r\n")
    return status, headers, body


async def test_a_request_that_is_no_upgrade_gets_a_400_naming_the_problem(
    start_server: Starter,
) -> None:
    server = await start_server(Recorder().echo)
    status, headers, body = await http_exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == "HTTP/1.1 400 Bad Request"
    assert body == "'Upgrade: websocket' is required\n"
    assert f"Content-Length: {len(body)}" in headers
    status, _, body = await http_exchange(server, b"\x16\x03\x01\x02\x00\r\n\r\n")
    assert status == "HTTP/1.1 400 Bad Request" and "request line" in body


async def test_a_wrong_websocket_version_gets_a_426_naming_13(start_server: Starter) -> None:
    server = await start_server(Recorder().echo)
    port = server.sockets[0].getsockname()[1]
    status, headers, _ = await http_exchange(server, upgrade_request(port, version="8"))
    assert status == "HTTP/1.1 426 Upgrade Required"
    assert "Sec-WebSocket-Version: 13" in headers


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: x\r\n"])
async def test_a_client_that_does_not_finish_its_handshake_is_dropped(
    start_server: Starter, sent: bytes
) -> None:
    server = await start_server(Recorder().echo, handshake_timeout=0.3)
    started = time.monotonic()
    client = await RawClient.open(server, sent)
    try:
        assert await client.rest() == b""
    finally:
        await client.close()
    assert time.monotonic() - started < 3


async def test_process_request_can_refuse_and_sees_the_headers(start_server: Starter) -> None:
    from adare_guest.websocket.handshake import HttpResponse, Request

    seen: list[tuple[list[str], Any]] = []

    def only_friends(request: Request, remote_address: Any) -> HttpResponse | None:
        seen.append((request.headers.get_all("X-Friend"), remote_address))
        if request.headers.get_all("X-Friend") == ["yes"]:
            return None
        return HttpResponse.text(403, "friends only", [("X-Why", "not a friend")])

    recorder = Recorder()
    server = await start_server(recorder.echo, process_request=only_friends)
    with pytest.raises(InvalidStatus) as refused:
        await connect(url(server), additional_headers={"X-Friend": "no"}, open_timeout=WAIT)
    response = refused.value.response
    assert response.status_code == 403 and response.headers["X-Why"] == "not a friend"
    assert response.body == b"friends only\n"
    async with await connected(server, additional_headers={"X-Friend": "yes"}) as ws:
        await ws.send("hi")
        assert await ws.recv() == "hi"
    assert [headers for headers, _ in seen] == [["no"], ["yes"]]
    assert seen[0][1][0] == "127.0.0.1"


async def test_the_agent_refuses_a_bad_token_with_401_and_www_authenticate(
    agent_config: AgentConfig,
) -> None:
    agent_config.token = "right"
    agent = AdareVMServer(agent_config)
    await agent.start()
    try:
        assert agent.listen_address is not None
        address = f"ws://127.0.0.1:{agent.listen_address[1]}"
        with pytest.raises(InvalidStatus) as refused:
            await connect(address, additional_headers={"Authorization": "Bearer wrong"})
        response = refused.value.response
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert response.body == b"missing or wrong bearer token\n"
        headers = {"Authorization": "Bearer right"}
        async with connect(address, additional_headers=headers, compression=None) as ws:
            welcome = json.loads(await ws.recv())
            assert welcome["data"]["message"] == "Connected to AdareVM server"
    finally:
        await agent.stop()
