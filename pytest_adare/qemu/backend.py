"""The QEMU backend's entry (:mod:`pytest_adare.machine.registry`): QEMU started here,
one process per VM (:class:`~pytest_adare.qemu.machine.Machine`). Its LAN segments need
no network of their own: the host forwards each between the members' datagram sockets
(:mod:`pytest_adare.lan.forwarder`)."""

from __future__ import annotations

from pytest_adare.machine.base import MachineFactory
from pytest_adare.qemu.machine import Machine
from pytest_adare.vm_options import VMOptions


def machine_factory(options: VMOptions, serial_device: str | None) -> MachineFactory:
    """:class:`Machine` itself: the spec says all a QEMU started here needs."""
    del options, serial_device  # the spec carries the agent link; nothing else is needed
    return Machine
