"""Ready means what the user says: their command exits 0."""

from __future__ import annotations

import asyncio
import time

from pytest_adare.errors import ToolError, VMTimeout
from pytest_adare.vm_phases.readiness.base import ReadyTarget

TRY_TIMEOUT = 60.0
"""Bound on one run of the user's readiness command."""
RETRY_PAUSE = 1.0
"""Seconds between two runs of the readiness command."""


class ReadyCommand:
    """Run ``command`` until it exits 0 (once a second, bounded by ``timeout``); the
    timeout names the command, its tries and its last answer."""

    def __init__(self, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout

    async def wait(self, target: ReadyTarget) -> str | None:
        deadline = time.monotonic() + self.timeout
        tries = 0
        while True:
            tries += 1
            remaining = deadline - time.monotonic()
            try:
                result = await target.guest.aio.shell(
                    self.command, timeout=max(1.0, min(remaining, TRY_TIMEOUT))
                )
            except (ToolError, VMTimeout) as error:
                last = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
            else:
                if result.returncode == 0:
                    return f"ready command exited 0 (try {tries})"
                output = (result.stdout + result.stderr).strip()
                last = f"exit {result.returncode}" + (f": {output[-200:]}" if output else "")
            if time.monotonic() + RETRY_PAUSE >= deadline:
                raise VMTimeout(
                    f"the ready command {self.command!r} to exit 0 ({tries} tries; last: {last})",
                    self.timeout,
                    target.machine.console_tail(),
                )
            await asyncio.sleep(RETRY_PAUSE)
