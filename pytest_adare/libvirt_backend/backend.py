"""The libvirt backend's entry (:mod:`pytest_adare.machine.registry`): each VM a
transient domain on the hypervisor ``hypervisor=URI`` names
(:class:`~pytest_adare.libvirt_backend.machine.LibvirtMachine`), each LAN segment a
transient isolated libvirt network there (:class:`~.network.LibvirtNetwork`)."""

from __future__ import annotations

from pytest_adare.libvirt_backend.machine import libvirt_machine_factory
from pytest_adare.libvirt_backend.network import LibvirtNetwork
from pytest_adare.machine.base import MachineFactory
from pytest_adare.vm_options import VMOptions


def _uri(options: VMOptions) -> str:
    if options.hypervisor is None:  # the registry's backend_for refuses this first
        raise ValueError("the libvirt backend needs hypervisor=URI (e.g. qemu:///system)")
    return options.hypervisor


def machine_factory(options: VMOptions, serial_device: str | None) -> MachineFactory:
    """Domains on ``options.hypervisor``; the domain XML wires ``serial_device``."""
    return libvirt_machine_factory(_uri(options), serial_device)


def lan_network(options: VMOptions, index: int) -> LibvirtNetwork:
    """The ``index``-th LAN segment: a new isolated network on the hypervisor."""
    return LibvirtNetwork(_uri(options), index).create()
