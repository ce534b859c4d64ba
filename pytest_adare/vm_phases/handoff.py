"""What the guest is handed at boot, and the ``boot`` phase of a built-in image.

A built-in image's init starts the agent with the per-VM config (and a newer bundle)
handed over in its initrd or by fw_cfg (:func:`boot_inputs`); any other Linux image with
``install="auto"`` gets a NoCloud seed instead (:func:`cloud_init_seed`): cloud-init
images take the agent from it, others ignore it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_adare.agent.cloud_init import write_seed
from pytest_adare.agent.install import prepare_boot_handoff
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.vm_phases.readiness import Listening
from pytest_adare.vm_phases.state import VMState

AGENT_STARTED = r"adare-init: agent started"
"""The console line a built-in image's init prints once it started the agent."""
LISTEN_PROBE_TIMEOUT = 120.0
"""Bound on waiting for the agent to report (over serial) that it listens."""


@dataclass(frozen=True)
class BootInputs:
    """The image QEMU boots (its initrd may carry the hand-off), the fw_cfg files, and
    one line saying what was handed over (empty without a hand-off)."""

    image: ImageManifest
    fw_cfg: dict[str, Path]
    describe: str = ""


def boot_inputs(vm: VMState, bundle: AgentBundle) -> BootInputs:
    """The hand-off of ``bundle`` for a built-in image (written into ``vm.workdir``),
    else the image."""
    if not vm.handoff:
        return BootInputs(vm.manifest, {})
    handoff = prepare_boot_handoff(vm.manifest, vm.workdir, vm.agent_config, bundle)
    image = vm.manifest
    if handoff.initrd is not None:
        image = replace(image, initrd=handoff.initrd)
    return BootInputs(image, dict(handoff.fw_cfg), handoff.describe())


def cloud_init_seed(vm: VMState, bundle: AgentBundle) -> Path | None:
    """The NoCloud seed carrying ``bundle`` for an image whose agent is not handed over
    at boot (Linux, ``install="auto"``), else None."""
    if vm.handoff or vm.options.install != "auto" or vm.layout.os != "linux":
        return None
    return write_seed(
        vm.workdir / "cidata.iso", vm.layout, bundle, vm.agent_config,
        instance_id=f"adare-{vm.token[:16]}",
    )  # fmt: skip


async def await_boot(vm: VMState, inputs: BootInputs) -> None:
    """The ``boot`` phase: the init says it started the agent, then (over the serial
    health report) that the agent listens."""
    t = time.monotonic()
    await vm.machine.await_for_console(AGENT_STARTED, vm.options.boot_timeout)
    listening = await Listening(LISTEN_PROBE_TIMEOUT).wait(vm)
    vm.record("boot", t, f"agent started by the guest's init ({inputs.describe})"
              f"{', listening' if listening else ''}")  # fmt: skip
