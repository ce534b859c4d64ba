"""The agent's serial transport over a real pty pair, with the real server and host client.

The agent's side opens the pty's slave with pyserial exactly as it opens /dev/ttyS1 in
a VM; the host's side talks to the master (directly, or through a Unix socket like
QEMU's chardev).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import time
import tty
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adare_guest.config import AgentConfig
from adare_guest.protocol import Event
from adare_guest.serial.link import (
    ErrorCode,
    Fragment,
    HostLink,
    Op,
    PollFlag,
    Reassembler,
    RemoteError,
)
from adare_guest.serial.transport import CharDevicePort, SerialTransport, open_device
from adare_guest.server import AdareVMServer
from frame_codec import DecodeEvent, FrameDecoder, Kind
from pytest_adare.agent.serial_client import SerialAgentClient, SerialLinkChannel
from pytest_adare.errors import AgentDisconnected, ToolError

FRAME_TIMEOUT = 0.3
WAIT = 20.0


@dataclass
class PtyAgent:
    server: AdareVMServer
    transport: SerialTransport
    master: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def channel(self, **kwargs: Any) -> SerialLinkChannel:
        return SerialLinkChannel(self.reader, self.writer, "pty master", **kwargs)

    async def read_frames(self, count: int, timeout: float = WAIT) -> list[Any]:
        """The next ``count`` frames (or frame errors) the agent writes."""
        decoder, found = FrameDecoder(), list[DecodeEvent]()
        deadline = time.monotonic() + timeout
        while len(found) < count:
            chunk = await asyncio.wait_for(self.reader.read(4096), deadline - time.monotonic())
            found.extend(decoder.feed(chunk))
        return found


async def pty_streams(
    master: int,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.ReadTransport]:
    """A reader and a writer on the pty master, and the read transport (the caller closes it)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(master, "rb", 0, closefd=False)
    )
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
        os.fdopen(os.dup(master), "wb", 0),
    )
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer, read_transport


@pytest_asyncio.fixture
async def pty_agent(agent_config: AgentConfig) -> AsyncIterator[PtyAgent]:
    """A real agent (WebSocket listening too) serving its serial link on a pty slave."""
    server = AdareVMServer(agent_config)
    await server.start()
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo even before pyserial configures the port
    transport = SerialTransport(
        server, os.ttyname(slave), frame_timeout=FRAME_TIMEOUT, reopen_delay=0.2
    )
    task = asyncio.get_running_loop().create_task(transport.serve())
    reader, writer, read_transport = await pty_streams(master)
    agent = PtyAgent(server, transport, master, reader, writer)
    # pyserial flushes the input when it opens the port: wait until the agent answers.
    await agent.channel(exchange_timeout=1.0, attempts=20).exchange(Op.PING)
    try:
        yield agent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)
        writer.close()
        read_transport.close()
        await server.stop()
        os.close(slave)
        with contextlib.suppress(OSError):
            os.close(master)


@pytest.mark.asyncio
async def test_ping_reports_the_agents_health(pty_agent: PtyAgent) -> None:
    health = json.loads(await pty_agent.channel().exchange(Op.PING))
    port = pty_agent.server.listen_address[1] if pty_agent.server.listen_address else None
    assert health["listen"] == f"127.0.0.1:{port}" and health["listening"] is True
    assert health["version"] and health["uptime"] >= 0
    assert "last_error" in health and isinstance(health["serial_errors"], int)


@pytest.mark.asyncio
async def test_a_tool_result_spanning_hundreds_of_frames_arrives_whole(pty_agent: PtyAgent) -> None:
    client = await SerialAgentClient.attach(pty_agent.channel(), timeout=WAIT)
    events: list[Event] = []
    client.subscribe(events.append)
    try:
        assert "execute_shell" in client.server_info["tools"]
        assert client.server_info["available_tools"]  # from the welcome event
        size = 400_000  # about 400 response frames
        result = await client.call(
            "execute_shell", {"shell_command": f"head -c {size} /dev/zero | tr '\\0' x"}
        )
        assert result["returncode"] == 0 and result["stdout"] == "x" * size
        stamp = await client.call("get_timestamp")
        assert abs(stamp["timestamp"] - time.time()) < 60
        with pytest.raises(ToolError, match="unknown tool"):
            await client.call("no_such_tool")
        assert {"command_start", "command_complete"} <= {e.event_type.value for e in events}
        health = await client.ping()
        assert health["sessions"] >= 1
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_a_large_tool_call_is_sent_in_many_fragments(
    pty_agent: PtyAgent, tmp_path: Path
) -> None:
    client = await SerialAgentClient.attach(pty_agent.channel(), timeout=WAIT)
    data = os.urandom(300_000)  # 400 kB of base64: about 200 request frames
    target = tmp_path / "pushed.bin"
    try:
        result = await client.call(
            "push_file_chunk",
            {
                "guest_path": str(target),
                "chunk_index": 0,
                "total_chunks": 1,
                "chunk_data": base64.b64encode(data).decode(),
                "sha256": hashlib.sha256(data).hexdigest(),
            },
        )
        assert result["status"] == "success", result
        assert target.read_bytes() == data
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_closing_the_client_cancels_its_calls_in_the_agent(pty_agent: PtyAgent) -> None:
    client = await SerialAgentClient.attach(pty_agent.channel(), timeout=WAIT)
    call = asyncio.create_task(client.call("execute_shell", {"shell_command": "sleep 31.4159"}))
    deadline = time.monotonic() + WAIT
    while not any(s.running_calls for s in pty_agent.server.sessions):
        assert time.monotonic() < deadline, "the call never started in the agent"
        await asyncio.sleep(0.05)
    await client.close()
    with pytest.raises(AgentDisconnected):
        await call
    while pty_agent.server.sessions:
        assert time.monotonic() < deadline, "the agent kept the closed session"
        await asyncio.sleep(0.05)
    while await pgrep("sleep 31.4159"):
        assert time.monotonic() < deadline, "the call's process outlived the session"
        await asyncio.sleep(0.05)


async def pgrep(pattern: str) -> bytes:
    ps = await asyncio.create_subprocess_exec(
        "pgrep", "-f", pattern, stdout=asyncio.subprocess.PIPE
    )
    return (await ps.communicate())[0]


@pytest.mark.asyncio
async def test_garbage_from_the_host_is_answered_and_the_next_exchange_is_clean(
    pty_agent: PtyAgent,
) -> None:
    pty_agent.writer.write(os.urandom(3000).replace(b"D", b"d"))
    frames = await pty_agent.read_frames(1)
    assert frames[0].kind is Kind.RESPONSE
    assert frames[0].payload[:3] == bytes((Op.ERROR.answer, 0, ErrorCode.MALFORMED_FRAME))
    await asyncio.sleep(0.2)  # the rest of the garbage is drained, not answered again
    health = json.loads(await pty_agent.channel().exchange(Op.PING))
    assert health["serial_errors"] >= 1


@pytest.mark.asyncio
async def test_a_frame_cut_off_mid_way_is_answered_partial_after_the_bounded_wait(
    pty_agent: PtyAgent,
) -> None:
    wire = HostLink().request(Op.PING)
    started = time.monotonic()
    pty_agent.writer.write(wire[:7])
    frames = await pty_agent.read_frames(1)
    assert time.monotonic() - started >= FRAME_TIMEOUT
    assert frames[0].payload[:3] == bytes((Op.ERROR.answer, 0, ErrorCode.PARTIAL_FRAME))
    assert b"7 bytes received" in frames[0].payload
    assert json.loads(await pty_agent.channel().exchange(Op.PING))["listening"] is True


@pytest.mark.asyncio
async def test_a_peer_that_stops_mid_frame_then_returns_gets_its_answer(
    pty_agent: PtyAgent,
) -> None:
    pty_agent.writer.write(HostLink().request(Op.POLL)[:4])
    await asyncio.sleep(FRAME_TIMEOUT * 2)
    channel = pty_agent.channel(exchange_timeout=2.0)
    health = json.loads(await channel.exchange(Op.PING))
    assert health["version"]
    assert channel.retries >= 1  # the stale PARTIAL_FRAME answer made it resend once


@pytest.mark.asyncio
async def test_an_over_limit_header_is_refused_without_waiting(pty_agent: PtyAgent) -> None:
    pty_agent.writer.write(b"DV\x01\x01\x10\x00")
    frames = await pty_agent.read_frames(1, timeout=FRAME_TIMEOUT * 0.9 + 5)
    assert frames[0].payload[2] == ErrorCode.TOO_LARGE


@pytest.mark.asyncio
async def test_abort_drops_a_half_sent_message(pty_agent: PtyAgent) -> None:
    channel = pty_agent.channel()
    await channel.exchange(Op.OPEN)
    await channel.exchange(Op.SEND, Fragment(5000, 0, b"{" * 100).encode())
    dropped = await channel.exchange(Op.ABORT)
    assert int.from_bytes(dropped, "big") == 100
    with pytest.raises(RemoteError, match="OUT_OF_SEQUENCE"):
        await channel.exchange(Op.SEND, Fragment(5000, 100, b"x").encode())


@pytest.mark.asyncio
async def test_an_invalid_message_gets_an_error_event_and_the_session_stays_usable(
    pty_agent: PtyAgent,
) -> None:
    channel = pty_agent.channel()
    await channel.exchange(Op.OPEN)
    await channel.exchange(Op.SEND, Fragment(9, 0, b"{not json").encode())
    messages = await poll_messages(channel, until=lambda m: m.get("event_type") == "error")
    error = messages[-1]
    assert error["type"] == "event" and "invalid JSON" in error["data"]["message"]
    call = {"type": "ping", "id": "p-1", "timestamp": None}
    text = json.dumps(call).encode()
    await channel.exchange(Op.SEND, Fragment(len(text), 0, text).encode())
    pong = await poll_messages(channel, until=lambda m: m.get("type") == "pong")
    assert pong[-1]["id"] == "p-1"


async def poll_messages(channel: SerialLinkChannel, until: Any) -> list[dict[str, Any]]:
    reassembler, messages = Reassembler(1 << 24), []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        body = await channel.exchange(Op.POLL)
        if body[0] & PollFlag.DATA:
            message = reassembler.add(Fragment.parse(body[1:]))
            if message is not None:
                messages.append(json.loads(message))
                if until(messages[-1]):
                    return messages
        else:
            await asyncio.sleep(0.02)
    raise AssertionError(f"no matching message within {WAIT} s: {messages}")


@pytest.mark.asyncio
async def test_the_agent_survives_the_device_going_away(pty_agent: PtyAgent) -> None:
    pty_agent.writer.close()
    os.close(pty_agent.master)
    deadline = time.monotonic() + WAIT
    while not (pty_agent.server.last_error or "").startswith("serial device"):
        assert time.monotonic() < deadline, "the device failure was never recorded"
        await asyncio.sleep(0.05)
    assert pty_agent.server.health()["listening"] is True


# --- through a Unix socket, as QEMU's chardev offers it ---------------------------------


@pytest_asyncio.fixture
async def socket_path(pty_agent: PtyAgent, tmp_path: Path) -> AsyncIterator[str]:
    """A Unix socket bridged to the pty master, one connection at a time (like QEMU)."""
    path = str(tmp_path / "agent-serial.sock")
    busy = asyncio.Lock()

    async def bridge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with busy:
            to_guest = asyncio.create_task(pump(reader, pty_agent.writer))
            to_host = asyncio.create_task(pump(pty_agent.reader, writer))
            await to_guest  # the host closed its end
            to_host.cancel()
            writer.close()

    server = await asyncio.start_unix_server(bridge, path)
    try:
        yield path
    finally:
        server.close()


async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()


@pytest.mark.asyncio
async def test_client_and_one_off_ping_over_a_unix_socket(socket_path: str) -> None:
    health = await SerialAgentClient.ping(socket_path, timeout=5.0)
    assert health["listening"] is True
    client = await SerialAgentClient.connect(socket_path, timeout=WAIT)
    try:
        assert (await client.call("get_timestamp"))["timezone"]
        assert (await client.ping())["version"] == health["version"]
    finally:
        await client.close()
    with pytest.raises(AgentDisconnected, match="closed by the host"):
        await client.call("get_timestamp")


@pytest_asyncio.fixture
async def silent_socket(tmp_path: Path) -> AsyncIterator[str]:
    """A Unix socket that accepts connections and never says a word."""
    path = str(tmp_path / "silent.sock")
    accepted: list[asyncio.StreamWriter] = []
    server = await asyncio.start_unix_server(lambda r, w: accepted.append(w), path)
    try:
        yield path
    finally:
        server.close()
        for writer in accepted:  # the accepted ends: closed here, not left to the GC
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await server.wait_closed()


@pytest.mark.asyncio
async def test_a_silent_peer_makes_ping_fail_with_a_clear_error(silent_socket: str) -> None:
    started = time.monotonic()
    with pytest.raises(AgentDisconnected, match=r"no valid answer to PING .* 2 attempts"):
        await SerialAgentClient.ping(silent_socket, timeout=1.0)
    assert time.monotonic() - started < 10


@pytest.mark.asyncio
async def test_a_missing_socket_fails_within_the_timeout(tmp_path: Path) -> None:
    with pytest.raises(AgentDisconnected, match="cannot connect to the agent's serial socket"):
        await SerialAgentClient.connect(str(tmp_path / "nothing.sock"), timeout=0.5)


def test_a_non_tty_character_device_is_opened_without_pyserial(tmp_path: Path) -> None:
    fifo = tmp_path / "vport0p1"  # stands in for a virtio-serial port: not a tty
    os.mkfifo(fifo)
    port = open_device(str(fifo))
    try:
        assert isinstance(port, CharDevicePort)
        assert port.read(10) == b"" and port.in_waiting == 0  # bounded: returns empty
        port.write(b"DV" * 100)
        assert port.in_waiting and port.read(4) == b"DVDV"
        port.reset_input_buffer()
        assert port.in_waiting == 0
    finally:
        port.close()


@pytest.mark.asyncio
async def test_connect_to_a_silent_agent_gives_up_at_its_timeout(silent_socket: str) -> None:
    started = time.monotonic()
    with pytest.raises(AgentDisconnected, match=r"did not answer OPEN .* within 1.5 s"):
        await SerialAgentClient.connect(silent_socket, timeout=1.5)
    assert time.monotonic() - started < 10


@pytest.mark.asyncio
async def test_connect_to_a_socket_that_hangs_up_fails_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "hangup.sock")

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_unix_server(hang_up, path)
    try:
        started = time.monotonic()
        with pytest.raises(AgentDisconnected, match=r"was closed|cannot write|reading .* failed"):
            await SerialAgentClient.connect(path, timeout=30)
        assert time.monotonic() - started < 10
    finally:
        server.close()
