"""``guest.shell`` output limits and binary output, against the real agent on localhost.

The agent keeps at most ``max_output_bytes`` of each stream and carries output that
is not UTF-8 as base64; the facade gives the bytes back exactly and says what was cut.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from adare_guest.server import AdareVMServer
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest

pytestmark = pytest.mark.asyncio

BINARY = bytes(range(256)) * 4  # every byte value, not UTF-8


@pytest_asyncio.fixture
async def aguest(agent: AdareVMServer) -> AsyncIterator[AsyncGuest]:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], None)
    yield AsyncGuest(client)
    await client.close()


async def test_binary_output_arrives_byte_for_byte(aguest: AsyncGuest) -> None:
    octal = "".join(f"\\{byte:03o}" for byte in BINARY)
    result = await aguest.shell(f"printf '{octal}'; printf 'caf\\303\\251' >&2")
    assert result.stdout_raw == BINARY and not result.truncated
    assert result.stdout == BINARY.decode("utf-8", "replace")
    assert (result.stderr, result.stderr_raw) == ("café", "café".encode())
    assert (result.stdout_total, result.stderr_total) == (len(BINARY), 5)


async def test_max_output_bytes_cuts_each_stream_and_counts_the_rest(aguest: AsyncGuest) -> None:
    result = await aguest.shell(
        "head -c 100000 /dev/zero | tr '\\0' x; head -c 300 /dev/zero >&2", max_output_bytes=1000
    )
    assert result.ok and result.truncated
    assert (result.stdout, result.stdout_truncated, result.stdout_total) == (
        "x" * 1000,
        True,
        100000,
    )
    assert (result.stderr_raw, result.stderr_truncated, result.stderr_total) == (
        b"\0" * 300,
        False,
        300,
    )
