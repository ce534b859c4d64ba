"""The ``qemu`` phase: this VM's machine made through its factory and started."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from pytest_adare.machine.base import MachineBackend, MachineImage
from pytest_adare.machine.spec import spec_from_options
from pytest_adare.vm_phases.state import VMState


def make_machine(
    vm: VMState, image: MachineImage, fw_cfg: Mapping[str, Path], *, firmware: str = "bios",
    seed: Path | None = None, share_disks: tuple[Path, ...] = (), incoming: bool = False,
) -> MachineBackend:  # fmt: skip
    """This VM's (unstarted) machine for ``image``: its spec from the options
    (:func:`~pytest_adare.machine.spec.spec_from_options`), what every start shares, plus
    ``start`` (the cold boot's firmware, seed and share disks; the warm start's
    ``incoming``)."""
    spec = spec_from_options(
        vm.options, name=vm.name, agent_link=vm.agent_link, fw_cfg=fw_cfg,
        share_disks=share_disks, firmware=firmware, seed=seed, incoming=incoming,
    )  # fmt: skip
    return vm.new_machine(image, vm.workdir, spec)


async def start_machine(
    vm: VMState, image: MachineImage, fw_cfg: Mapping[str, Path], *, firmware: str = "bios",
    seed: Path | None = None, share_disks: tuple[Path, ...] = (), incoming: bool = False,
) -> MachineBackend:  # fmt: skip
    """Make and start the machine; ``vm.machine`` is set before it starts, so a failed
    start is still shut down by ``close``."""
    machine = vm.adopt_machine(make_machine(
        vm, image, fw_cfg, firmware=firmware, seed=seed, share_disks=share_disks,
        incoming=incoming,
    ))  # fmt: skip
    # A machine's lifecycle calls are sync and run their own steps on the shared loop:
    # from the loop itself they must go to a worker thread.
    await asyncio.to_thread(machine.start)
    return machine


async def cold_start(
    vm: VMState, image: MachineImage, fw_cfg: Mapping[str, Path], *, seed: Path | None,
    share_disks: tuple[Path, ...],
) -> None:  # fmt: skip
    """The ``qemu`` phase of a cold boot: firmware, seed, share disks and clock; the line
    names the accelerator, the firmware and the agent's serial link."""
    t = time.monotonic()
    machine = await start_machine(
        vm, image, fw_cfg, firmware=vm.firmware, seed=seed, share_disks=share_disks
    )
    accel = machine.accel_reason or f"accel {machine.accel}"
    vm.record("qemu", t, f"{accel}; {vm.firmware_reason}; {link_line(vm)}")


def link_line(vm: VMState) -> str:
    """Where the agent's serial link rides, for the ``qemu`` line."""
    if not vm.layout.serial_device:
        return "no agent serial link"
    carrier = "virtio-serial" if vm.agent_link == "virtio" else "the UART"
    return f"agent serial link on {carrier} ({vm.layout.serial_device})"


async def stop_machine(vm: VMState) -> None:
    """Shut the machine down, if there is one (safe to repeat; ``vm.machine`` stays, so
    its overlay and console can still be read)."""
    machine = vm.current_machine
    if machine is not None:
        await asyncio.to_thread(machine.shutdown)
