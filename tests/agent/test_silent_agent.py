"""A call whose agent goes silent fails fast and says what the agent was doing (issue 34).

A real agent runs on the host's shared loop thread, the host's client on the test's
loop. One tool blocks the agent's event loop on a lock (code on the loop that waits,
the defect class behind a silent agent); the host's call then fails as
:class:`AgentUnresponsive` long before its own timeout, and the agent's health report,
read from another thread as its serial link's device thread does, names the blocked
loop and the running call. A tool that is merely busy (in a worker thread) keeps
answering pings and gets its whole time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from adare_guest.config import AgentConfig
from adare_guest.serial.link import json_body
from adare_guest.server import AdareVMServer, default_groups
from adare_guest.tools.base import CallContext, ToolGroup, tool
from pytest_adare.agent.call_router import HOST_LATE, Stall
from pytest_adare.agent.stall_diagnosis import LOOP_LATE, describe_health, stall_cause
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentUnresponsive, VMTimeout
from pytest_adare.loop_thread import shared_loop

CALL_TIMEOUT = 240.0
"""The call's own bound: an agent that went silent must not cost this."""


class StallTools(ToolGroup):
    """Tools that misbehave the two ways a silent call can."""

    held = threading.Lock()

    @tool(timeout=600)
    async def wait_on_the_loop(self, ctx: CallContext) -> dict[str, Any]:
        """Blocks the agent's whole event loop until the test lets go of ``held``."""
        with self.held:  # a threading lock taken on the loop: nothing else runs meanwhile
            pass
        return {"status": "success"}

    @tool(timeout=600)
    async def work_in_a_thread(self, ctx: CallContext, *, seconds: float) -> dict[str, Any]:
        """Busy for ``seconds`` in a worker thread; the loop stays free."""
        await ctx.run_in_thread(time.sleep, seconds)
        return {"status": "success", "slept": seconds}


@pytest.fixture
def stalling_agent(agent_config: AgentConfig) -> Iterator[AdareVMServer]:
    """The agent's own tools plus :class:`StallTools`, on the shared loop thread."""
    server = AdareVMServer(agent_config, [*default_groups(), StallTools])
    shared_loop().run(server.start(), timeout=30)
    yield server
    if StallTools.held.locked():
        StallTools.held.release()
    shared_loop().run(server.stop(), timeout=30)


async def _client(server: AdareVMServer, unresponsive_after: float) -> AgentClient:
    assert server.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", server.listen_address[1], None)
    client.ping_after = 0.5
    client.unresponsive_after = unresponsive_after
    return client


@pytest.mark.asyncio
async def test_a_call_on_a_blocked_agent_loop_fails_fast_naming_the_blocked_loop(
    stalling_agent: AdareVMServer,
) -> None:
    # Silent longer than the agent's loop may be late before it counts as blocked.
    client = await _client(stalling_agent, LOOP_LATE + 3)
    seen: list[dict[str, Any]] = []

    async def check(tool: str, silent: float) -> Stall:
        # What the serial link's device thread answers: health() from another thread.
        health = await asyncio.to_thread(stalling_agent.health)
        seen.append(health)
        return Stall(True, [stall_cause(health, tool, silent), describe_health(health)])

    client.stall_check = check
    StallTools.held.acquire()
    try:
        with pytest.raises(AgentUnresponsive) as raised:
            await client.call("wait_on_the_loop", {}, timeout=CALL_TIMEOUT)
    finally:
        StallTools.held.release()
    text = str(raised.value)
    assert "the agent answered nothing, not even a ping" in text
    assert "'wait_on_the_loop'" in text
    assert "the agent's event loop is blocked" in text, text
    # ...and where: the line of the tool that holds the loop.
    assert seen[0]["loop_at"].startswith("test_silent_agent.py:"), seen[0]
    assert " wait_on_the_loop < " in seen[0]["loop_at"]
    assert seen[0]["calls"].startswith("wait_on_the_loop ")
    assert seen[0]["loop_late"] > 0
    await client.close()


@pytest.mark.asyncio
async def test_a_busy_agent_answers_pings_and_its_call_gets_its_whole_time(
    stalling_agent: AdareVMServer,
) -> None:
    client = await _client(stalling_agent, 4.0)
    checks: list[str] = []

    async def check(tool: str, silent: float) -> Stall:
        checks.append(tool)
        return Stall(True, [])

    client.stall_check = check
    # Busy twice as long as the silence the host tolerates: its pongs keep it alive.
    result = await client.call("work_in_a_thread", {"seconds": 8.0}, timeout=CALL_TIMEOUT)
    assert result["slept"] == 8.0
    assert checks == []
    await client.close()


def test_the_health_report_says_what_runs_and_fits_one_serial_frame(
    stalling_agent: AdareVMServer,
) -> None:
    shared_loop().run(asyncio.sleep(1.5), timeout=30)  # the heartbeat has beaten
    health = stalling_agent.health()
    assert health["loop_late"] is not None and health["loop_late"] < LOOP_LATE
    assert health["calls"] == ""
    assert health["workers"].endswith(", 0 abandoned")
    assert len(json_body(health, 1000)) <= 1000


@pytest.mark.asyncio
async def test_a_timeout_the_hosts_own_blocked_loop_overran_says_so(
    stalling_agent: AdareVMServer,
) -> None:
    client = await _client(stalling_agent, 600.0)
    # Something else in the pytest process holds the host's loop past the call's timeout.
    asyncio.get_running_loop().call_later(0.2, time.sleep, HOST_LATE + 3)
    with pytest.raises(VMTimeout) as raised:
        await client.call("work_in_a_thread", {"seconds": 30.0}, timeout=1.0)
    assert "the host's event loop ran late: this wait took" in str(raised.value)
    await client.close()
