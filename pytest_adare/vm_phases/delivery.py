"""How the agent reaches a guest without a boot-time hand-off: QEMU's guest agent
(qemu-ga) answering, or cloud-init starting the agent from the NoCloud seed."""

from __future__ import annotations

from pathlib import Path

from pytest_adare.agent.delivery import Channel, await_delivery
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.errors import AgentUnreachable
from pytest_adare.vm_phases.state import VMState


async def deliver(vm: VMState, seed: Path | None) -> Channel:
    """The first channel that answers (bounded by ``boot_timeout``, ended by the guest's
    death): qemu-ga, or cloud-init when the VM was booted with ``seed``; a failure
    carries the console's tail."""
    machine = vm.machine
    serial = machine.agent_serial_path if vm.layout.serial_device else None
    waited = "qemu-ga to answer guest-sync" + (" or cloud-init to start the agent" if seed else "")
    try:
        return await machine.bounded(
            await_delivery(
                lambda: vm.qga.sync(vm.options.boot_timeout),
                seed=seed is not None,
                console_log=machine.console_log_path,
                serial_path=serial,
                ping=SerialAgentClient.ping_path,
            ),
            vm.options.boot_timeout + 5,
            waited,
        )
    except AgentUnreachable as failure:
        raise AgentUnreachable(failure.diagnosis, failure.details, machine.console_tail()) from None


async def await_qga(vm: VMState, timeout: float) -> None:
    """qemu-ga answers ``guest-sync`` within ``timeout`` s (ended by the guest's death)."""

    async def sync() -> None:
        await vm.qga.sync(timeout)

    await vm.machine.bounded(sync(), timeout + 5, "qemu-ga to answer guest-sync")
