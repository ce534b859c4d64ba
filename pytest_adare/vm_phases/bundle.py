"""The ``bundle`` phase: the host-side agent bundle this VM's guest runs (cached)."""

from __future__ import annotations

import asyncio
import time

from pytest_adare.image.agent_bundle import AgentBundle, build_agent_bundle
from pytest_adare.vm_phases.state import VMState


async def build_bundle(vm: VMState) -> AgentBundle:
    """Build (or take from the cache) the bundle and record the phase; the later
    phases that hand it to the guest (and the warm key) are given it."""
    t = time.monotonic()
    # pyautogui and its helpers go into the bundle only when the agent drives the GUI.
    gui = vm.manifest.desktop and vm.gui != "host"
    bundle = await asyncio.to_thread(build_agent_bundle, gui=gui)
    vm.record("bundle", t, f"{bundle.version} {bundle.bundle_hash[:12]}")
    return bundle
