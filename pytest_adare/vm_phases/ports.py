"""The ``ports`` phase: the VM's forwarded guest ports made on its machine, after every
start (cold, warm, reboot), and handed to the guest facade (``guest.port(80)``).

Forwards are never in a saved state: a warm start loads the state, then forwards
(:mod:`pytest_adare.machine_tools.port_forward`).
"""

from __future__ import annotations

import time
from typing import cast

from pytest_adare.machine.base import Capability, unsupported
from pytest_adare.machine_tools.port_forward import HumanMonitor
from pytest_adare.vm_phases.state import VMState


def _why_not(vm: VMState) -> str:
    if Capability.PORT_FORWARD not in vm.machine.capabilities:
        return str(unsupported(vm.machine.backend, Capability.PORT_FORWARD))
    if not vm.options.network:
        return "the VM has no network card (network=False)"
    return ""


async def forward_ports(vm: VMState) -> None:
    """Bind the VM's forwards to its (new) machine and make them; one line when any.

    :raise PortForwardError: QEMU refused a forward.
    """
    t = time.monotonic()
    why_not = _why_not(vm)
    machine = None if why_not else cast(HumanMonitor, vm.machine)
    await vm.forwards.bind(machine, vm.options.ports, why_not)
    guest = vm.current_guest
    if guest is not None:
        guest.aio.use_ports(vm.forwards)
    if vm.forwards.forwards:
        vm.record("ports", t, vm.forwards.describe())
