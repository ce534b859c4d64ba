"""The ``qga`` and ``install`` phases: the agent installed and started over qemu-ga
(:func:`pytest_adare.agent.install.install_agent` does the work)."""

from __future__ import annotations

import time

from pytest_adare.agent.install import install_agent
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.vm_phases.readiness import Listening
from pytest_adare.vm_phases.state import VMState

LISTEN_TIMEOUT = 60.0
"""Bound on waiting for a freshly installed agent to say it listens."""


async def install(vm: VMState, bundle: AgentBundle, started: float) -> None:
    """Record ``qga`` (answering since ``started``), install ``bundle`` and the config,
    start the agent and wait until it listens."""
    vm.record("qga", started, "qemu-ga answers")
    t = time.monotonic()
    report = await install_agent(vm.qga, vm.layout, bundle, vm.agent_config, progress=vm.progress)
    listening = await Listening(LISTEN_TIMEOUT).wait(vm)
    vm.record("install", t, report.describe() + (", listening" if listening else ""))
