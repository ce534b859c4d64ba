"""Ready to connect: the agent's serial health report says it listens."""

from __future__ import annotations

import asyncio
import contextlib
import time

from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.errors import AdareError
from pytest_adare.vm_phases.readiness.base import ReadyTarget

PING_FIRST_TIMEOUT = 1.0
PING_MAX_TIMEOUT = 3.0


class Listening:
    """Ping the agent's serial link until it reports ``listening`` (a slow guest takes
    seconds to start Python); ``"listening"``, or None when it never said so within
    ``timeout`` or the VM has no serial link to ask (the connect then finds out)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    async def wait(self, target: ReadyTarget) -> str | None:
        if target.transport == "serial" or not target.layout.serial_device:
            return None
        deadline = time.monotonic() + self.timeout
        path = target.machine.agent_serial_path
        # Short pings first: a ping sent before the agent opened its serial device is
        # lost, and waiting out a long timeout then delays the connect by seconds.
        ping_timeout = PING_FIRST_TIMEOUT
        while time.monotonic() < deadline:
            target.machine.check_alive()
            with contextlib.suppress(AdareError, OSError):
                if (await SerialAgentClient.ping_path(path, timeout=ping_timeout)).get("listening"):
                    return "listening"
            ping_timeout = min(ping_timeout * 1.5, PING_MAX_TIMEOUT)
            await asyncio.sleep(0.2)
        return None
