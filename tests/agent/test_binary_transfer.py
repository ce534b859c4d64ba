"""Binary file transfer against the real agent in-process, over WebSocket and the serial link.

Every pull and push must be bit-exact at the sizes where chunking goes wrong (0, 1,
chunk-1, chunk, chunk+1) and for 64 MiB of random data, and must really take the
binary path (the agent offers it; the JSON chunk tools are then not called).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from test_serial_transport import PtyAgent, pty_agent  # noqa: F401 (a fixture)

from adare_guest.server import AdareVMServer
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.transfer import binary_transport, pull_file, push_file
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest

pytestmark = pytest.mark.asyncio

CHUNK = 64 * 1024
"""Small chunks, so that chunk-sized edge cases are cheap and a file spans many chunks."""
EDGE_SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 3]
BIG = 64 * 2**20


Connected = tuple[AsyncGuest, AdareVMServer]


@pytest_asyncio.fixture
async def websocket_guest(agent: AdareVMServer) -> AsyncIterator[Connected]:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], None)
    yield AsyncGuest(client), agent
    await client.close()


@pytest_asyncio.fixture
async def serial_guest(pty_agent: PtyAgent) -> AsyncIterator[Connected]:  # noqa: F811
    client = await SerialAgentClient.attach(pty_agent.channel())
    yield AsyncGuest(client), pty_agent.server
    await client.close()


@pytest.fixture(params=["websocket", "serial"])
def connected(request: pytest.FixtureRequest) -> Connected:
    pair: Connected = request.getfixturevalue(f"{request.param}_guest")
    return pair


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def digest(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def count_tool_calls(server: AdareVMServer) -> dict[str, int]:
    """Count the agent's calls of the file tools from here on (wrapping the real tools)."""
    counts = {"pull_file": 0, "push_file": 0, "pull_file_chunk": 0, "push_file_chunk": 0}

    def counting(name: str, real: Callable[..., Awaitable[dict[str, Any]]]) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
            counts[name] += 1
            return await real(*args, **kwargs)

        return counted

    for name in counts:
        bound = server.tools[name]
        bound.func = counting(name, bound.func)
    return counts


@pytest.mark.parametrize("size", EDGE_SIZES)
async def test_pull_and_push_are_bit_exact_at_chunk_edges(
    connected: Connected, tmp_path: Path, size: int
) -> None:
    aguest, _server = connected
    assert binary_transport(aguest.connection) is not None
    source = random_file(tmp_path / "source.bin", size)
    guest_path = str(tmp_path / "guest" / "copy.bin")
    pushed: list[tuple[int, int]] = []
    await aguest.push(source, guest_path, chunk_size=CHUNK, progress=lambda *p: pushed.append(p))
    assert digest(guest_path) == digest(source)
    assert pushed[-1] == (size, size)

    back = await aguest.pull(guest_path, tmp_path / "host" / "back.bin", chunk_size=CHUNK)
    assert back.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in back.parent.iterdir()) == ["back.bin"]
    assert sorted(p.name for p in Path(guest_path).parent.iterdir()) == ["copy.bin"]


async def test_64_mib_round_trip_takes_the_binary_path(
    connected: Connected, tmp_path: Path
) -> None:
    aguest, server = connected
    counts = count_tool_calls(server)
    source = random_file(tmp_path / "big.bin", BIG)
    guest_path = str(tmp_path / "guest-big.bin")
    await aguest.push(source, guest_path)
    back = await aguest.pull(guest_path, tmp_path / "back-big.bin")
    assert digest(back) == digest(guest_path) == digest(source)
    assert counts == {"pull_file": 1, "push_file": 1, "pull_file_chunk": 0, "push_file_chunk": 0}


async def test_the_json_chunk_form_still_works_beside_it(
    connected: Connected, tmp_path: Path
) -> None:
    """The reference host (adare) knows only pull/push_file_chunk: they stay bit-exact."""
    aguest, server = connected
    counts = count_tool_calls(server)
    source = random_file(tmp_path / "source.bin", 3 * CHUNK + 5)
    guest_path = str(tmp_path / "guest-json.bin")

    async def call(tool: str, /, **params: Any) -> dict[str, Any]:
        return await aguest.call(tool, **params)

    await push_file(call, source, guest_path, chunk_size=CHUNK)
    back = await pull_file(call, guest_path, tmp_path / "back.bin", chunk_size=CHUNK)
    assert back.read_bytes() == source.read_bytes()
    assert counts == {"pull_file": 0, "push_file": 0, "pull_file_chunk": 4, "push_file_chunk": 4}
