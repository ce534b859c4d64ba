"""A desktop is ready once a window holds the keyboard focus (the probe is
:mod:`pytest_adare.agent.desktop_ready`)."""

from __future__ import annotations

from pytest_adare.agent.desktop_ready import await_focused_window
from pytest_adare.vm_phases.readiness.base import ReadyTarget


class FocusedDesktop:
    """Wait up to ``timeout`` s for a focused window; ``"<its WM_CLASS> has the keyboard
    focus"``. :raise VMTimeout: none got the focus in time (with the console's tail)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    async def wait(self, target: ReadyTarget) -> str | None:
        focused = await await_focused_window(
            target.guest.aio, self.timeout, console_tail=target.machine.console_tail(20)
        )
        return f"{focused} has the keyboard focus"
