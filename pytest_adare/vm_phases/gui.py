"""The ``gui`` phase: where screenshots and input go (``agent`` or ``host``) and why."""

from __future__ import annotations

import time

from adare_guest.tool_names import SCREENSHOT
from pytest_adare.errors import ToolError, VMTimeout
from pytest_adare.guest import AsyncGuest, tool_result
from pytest_adare.machine_tools.screen import QemuScreen
from pytest_adare.vm_phases.state import GuiChoice, VMState

PROBE_TIMEOUT = 60.0
"""Bound on the agent's first screenshot when ``gui="auto"`` asks whether its display works."""


def host_screen(vm: VMState) -> QemuScreen:
    """The hypervisor's screen and input of the VM's current machine."""
    return QemuScreen(vm.machine, vm.manifest.display)


async def pick_gui(vm: VMState, saved: str | None = None) -> None:
    """Choose, record the phase, and point the facade's screen at the choice; ``saved``:
    the choice recorded with the ready state a warm start loaded."""
    t = time.monotonic()
    guest = vm.guest.aio
    choice = vm.choose_gui(await choose_gui(vm, guest, saved))
    guest.use_screen(None if choice.mode == "agent" else host_screen(vm))
    vm.record("gui", t, choice.describe())


async def choose_gui(vm: VMState, guest: AsyncGuest, saved: str | None = None) -> GuiChoice:
    """As asked, or for ``auto`` the agent's when the image has a desktop and the agent
    can take a screenshot (its display works), else the hypervisor's. A warm start whose
    saved state chose the agent's takes it without asking again: the same RAM, the same
    X server and agent (the probe's screenshot was a third of the XFCE warm start)."""
    if vm.options.gui != "auto":
        return GuiChoice(vm.options.gui, f"gui={vm.options.gui!r} was asked for")
    if not vm.manifest.desktop:
        return GuiChoice("host", "auto: the image has no desktop; QEMU's screendump and input")
    if saved == "agent":
        return GuiChoice("agent", "auto: the agent's screenshot worked in the saved ready state")
    try:
        tool_result(SCREENSHOT, await guest.call(SCREENSHOT, timeout=PROBE_TIMEOUT))
    except (ToolError, VMTimeout) as error:
        text = error.message if isinstance(error, ToolError) else str(error)
        why = text.splitlines()[0] if text else type(error).__name__
        return GuiChoice("host", f"auto: the agent cannot take a screenshot: {why}")
    return GuiChoice("agent", "auto: the image has a desktop and the agent's screenshot works")
