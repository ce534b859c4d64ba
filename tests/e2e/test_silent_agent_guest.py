"""A silent agent in a real guest costs seconds, not the call's timeout, and the error says
why (issue 34): the test stops the agent (SIGSTOP, from a command the agent runs itself),
so its WebSocket stays open and nothing answers; the host's pings go unanswered, the
call fails as ``AgentUnresponsive`` naming the cause (the serial link, served by the
same process, is silent too), with the agent log's tail read over QGA. SIGCONT over
QGA and the agent answers again.
"""

from __future__ import annotations

import pytest

from pytest_adare.agent.call_router import CallRouter
from pytest_adare.errors import AgentUnresponsive
from pytest_adare.loop_thread import shared_loop
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

SILENCE = 15.0
"""The host's tolerance for silence here (60 s by default)."""


def test_a_stopped_agent_fails_the_call_fast_and_the_error_says_why(console_vm: VM) -> None:
    guest = console_vm.guest
    pid = int(guest.call("get_status")["pid"])
    connection = guest.aio.connection
    assert isinstance(connection, CallRouter)
    connection.unresponsive_after = SILENCE
    try:
        with pytest.raises(AgentUnresponsive) as raised:
            guest.shell(f"kill -STOP {pid}", timeout=600)
    finally:
        shared_loop().run(console_vm.qga.exec(["/bin/sh", "-c", f"kill -CONT {pid}"]), timeout=120)
        connection.unresponsive_after = 60.0
    text = str(raised.value)
    assert "the agent answered nothing, not even a ping" in text, text
    assert "'execute_shell'" in text
    assert "cause: the agent's serial link did not answer either" in text, text
    assert "agent log tail (" in text and "execute_shell" in text.split("agent log tail (")[1]
    assert guest.shell("echo back").check().stdout == "back\n"
