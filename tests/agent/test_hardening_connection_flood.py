"""Connection floods before login (issue 27, item 10), against a real agent process.

A local user who can reach the agent's port but has no token opens thousands of idle
sockets. The agent (1024 descriptors, as a guest's init gives it) must keep its
descriptors, keep its log short and still let the real host in while the flood holds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from adare_guest.websocket.server import HANDSHAKE_TIMEOUT, MAX_HANDSHAKES, WebSocketServer

pytestmark = pytest.mark.asyncio
REPO = Path(__file__).resolve().parents[2]
TOKEN = "flood-test-token-0123456789"
HOST_CONNECT_BOUND = HANDSHAKE_TIMEOUT
"""Seconds the real host may take to connect and get one answer during the flood: a
host kept out until the idle sockets' handshake time ran out would need at least that
(a property of the agent, not of this machine's speed; 3 s failed on a loaded host)."""


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_agent(run_dir: Path, nofile: int) -> Agent:
    """``python -m adare_guest`` with a token and ``nofile`` descriptors."""
    (run_dir / "config.json").write_text(json.dumps({"token": TOKEN}))
    (run_dir / "config.json").chmod(0o600)
    log = run_dir / "agent.log"

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    argv = [sys.executable, "-m", "adare_guest", str(run_dir), "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*argv, "--port", "0", "--log-file", str(log)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=limit_descriptors,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(
            r"listening on 127\.0\.0\.1:(\d+)", log.read_text() if log.exists() else ""
        )
        if found:
            return Agent(proc, int(found.group(1)), log)
        assert proc.poll() is None, "the agent exited"
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the agent did not listen within 60 s")


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.proc.kill()
        agent.proc.wait()


class IdleSocketFlood:
    """A thread that holds ``size`` idle connections to ``port`` open, opening a new one
    for each the agent drops, until stopped."""

    def __init__(self, port: int, size: int) -> None:
        self.port, self.size = port, size
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> IdleSocketFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _open(self) -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        self.opened += 1
        return sock

    def _run(self) -> None:
        held: dict[int, socket.socket] = {}
        poller = select.poll()
        try:
            while not self._stop.is_set():
                while len(held) < self.size:
                    sock = self._open()
                    held[sock.fileno()] = sock
                    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
                # Readable means the agent closed or reset it: replace it.
                for fd, _event in poller.poll(50):
                    poller.unregister(fd)
                    held.pop(fd).close()
        finally:
            for sock in held.values():
                sock.close()


async def host_connects(port: int) -> float:
    """Seconds for the real host to connect with the token and get one tool answered."""
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with connect(f"ws://127.0.0.1:{port}", additional_headers=headers, open_timeout=30) as ws:
        call = {"type": "tool_call", "id": "c", "timestamp": None, "tool": "get_status"}
        await ws.send(json.dumps({**call, "params": {}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "tool_result":
            pass
    return time.monotonic() - started


def flood_size(agent_nofile: int) -> int:
    """Twice the agent's descriptors, raising our own limit for them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * agent_nofile + 200
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    return min(2 * agent_nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)


async def test_idle_sockets_do_not_keep_the_real_host_out(
    tmp_path: Path, agents: list[Agent]
) -> None:
    agent = start_agent(tmp_path, nofile=1024)
    agents.append(agent)
    with IdleSocketFlood(agent.port, flood_size(1024)) as flood:
        await asyncio.sleep(2)  # the flood fills what it can
        took = max([await host_connects(agent.port) for _ in range(5)])
        descriptors = agent.descriptors()
        assert flood.opened >= flood.size
    assert took < HOST_CONNECT_BOUND, f"the host needed {took:.1f} s to get in"
    # The listener, the log, the event loop's own and the pending handshakes.
    assert descriptors < MAX_HANDSHAKES + 64, f"{descriptors} descriptors open"
    text = agent.log_text()
    assert "Traceback" not in text
    assert len(text) < 20_000, f"{len(text)} bytes of log for one flood"


async def test_running_out_of_descriptors_logs_one_counted_line_not_tracebacks(
    tmp_path: Path, agents: list[Agent]
) -> None:
    # Fewer descriptors than the pending-handshake limit: accept() fails with EMFILE.
    agent = start_agent(tmp_path, nofile=MAX_HANDSHAKES // 2)
    agents.append(agent)
    with IdleSocketFlood(agent.port, 400):
        await asyncio.sleep(4)
    text = agent.log_text()
    assert "Too many open files" in text, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    assert text.count("cannot accept connections") <= 2, text[-2000:]
    # Once the flood is gone the agent serves again, at once.
    assert await host_connects(agent.port) < HOST_CONNECT_BOUND


async def test_a_flood_from_one_address_leaves_other_addresses_their_handshake() -> None:
    async def handler(connection: Any) -> None:
        await connection.wait_closed()

    server = WebSocketServer(handler, max_size=1024, max_handshakes=8, max_handshakes_per_peer=4)
    await server.listen("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, patient = await asyncio.open_connection("127.0.0.1", port)
        flood = [
            await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            for _ in range(20)
        ]
        await asyncio.sleep(0.2)
        assert server.pending_handshakes <= 1 + 4
        patient.write(
            f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 101 "), head
        for _r, writer in [*flood, (reader, patient)]:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_the_total_limit_may_drop_the_only_other_connection_of_the_newcomer_s_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def handler(connection: Any) -> None:
        await connection.wait_closed()

    server = WebSocketServer(handler, max_size=1024, max_handshakes=2, max_handshakes_per_peer=2)
    await server.listen("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clients = []
    try:
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.2"):  # the third drops the first
            clients.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)))
            await asyncio.sleep(0.1)
        assert server.pending_handshakes == 2
        for _reader, writer in clients:
            writer.close()
        await asyncio.sleep(0.2)
        assert server.pending_handshakes == 0
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    finally:
        server.close()
        await server.wait_closed()
