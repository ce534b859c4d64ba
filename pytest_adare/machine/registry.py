"""The machine backends, registered by name: ``--adare-backend=qemu|libvirt``.

Each backend is one package with a module that defines ``machine_factory(options,
serial_device)`` (a :class:`~pytest_adare.machine.base.MachineFactory` for a VM with
those options) and, when the backend runs LAN segments of its own,
``lan_network(options, index)``; its :class:`Backend` entry here names that module and
the :class:`~pytest_adare.machine.base.Capability` set its machines can have, so that the
choices of the option, the docs' table and the compliance test
(``tests/unit/pytest_adare/machine/test_machine_protocol_compliance.py``)
iterate one list, and nothing is imported before a VM of that backend starts (the plugin
loads light).

Callers never ask which backend they got: warm start asks for
``Capability.MIGRATION``, forwarded ports for ``Capability.PORT_FORWARD``, a shared
folder for ``Capability.SHARE``, a LAN for the backend's own ``lan_network`` (none: the
host forwards the segment between the members' datagram sockets).

Adding a backend is one package and one :func:`register` call (a test registers its
fake machine this way and runs it through the compliance test).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

from pytest_adare.lan.port import HypervisorNetwork
from pytest_adare.machine.base import Capability, MachineFactory, unsupported
from pytest_adare.vm_options import VMOptions

AUTO = "auto"


class BackendModule(Protocol):
    """What a backend's module defines (``lan_network`` only when it runs its own LANs)."""

    def machine_factory(self, options: VMOptions, serial_device: str | None) -> MachineFactory:
        """The factory of this backend's machines for a VM with ``options``; the guest's
        agent serves ``serial_device`` (None: no serial link)."""


@dataclass(frozen=True)
class Backend:
    """One registered backend: its ``name``, the ``module`` defining its factory, the
    capabilities its machines can have (a machine may have fewer: a remote libvirt host
    exports no disk), and one line for the docs (``summary``)."""

    name: str
    module: str
    capabilities: frozenset[Capability]
    summary: str
    uri: bool = False
    """Its machines run on a hypervisor named by ``hypervisor=URI`` (required)."""

    def load(self) -> BackendModule:
        """The backend's module (imported now, on first use)."""
        return cast(BackendModule, importlib.import_module(self.module))

    def machine_factory(self, options: VMOptions, serial_device: str | None) -> MachineFactory:
        """This backend's machine factory for a VM with ``options``."""
        return self.load().machine_factory(options, serial_device)

    def lan_network(self, options: VMOptions, index: int) -> HypervisorNetwork | None:
        """The ``index``-th LAN segment as a network of this backend's own, or None when
        the host forwards the segment (the QEMU backend: datagram sockets)."""
        make: Any = getattr(self.load(), "lan_network", None)
        return None if make is None else cast(HypervisorNetwork, make(options, index))


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add ``backend`` to the registry (:raise ValueError: the name is taken)."""
    if backend.name in _REGISTRY or backend.name == AUTO:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend
    return backend


@contextmanager
def registered(backend: Backend) -> Iterator[Backend]:
    """``backend`` registered for the ``with`` block only (a test's own backend)."""
    register(backend)
    try:
        yield backend
    finally:
        del _REGISTRY[backend.name]


def backends() -> tuple[Backend, ...]:
    """Every registered backend, in registration order."""
    return tuple(_REGISTRY.values())


def backend_named(name: str) -> Backend:
    """:raise ValueError: no backend of that name (the message lists them)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"no backend named {name!r} (backends: {', '.join(_REGISTRY)})"
        ) from None


def backend_for(options: VMOptions) -> Backend:
    """The backend a VM with ``options`` runs on: ``options.backend``, or with ``auto``
    the libvirt backend when a hypervisor URI is given, else QEMU started here; checked
    against what the options ask (forwarded ports, a shared folder).

    :raise ValueError: an unknown backend, a hypervisor URI for a backend that takes
        none, or an option the backend cannot honour (the one ``unsupported`` message).
    """
    if options.backend != AUTO:
        backend = backend_named(options.backend)
    else:  # the first registered that takes a URI when one is given, else the first
        wanted = options.hypervisor is not None
        backend = next(b for b in _REGISTRY.values() if b.uri == wanted)
    if options.hypervisor is not None and not backend.uri:
        raise ValueError(f"hypervisor= names a libvirt URI: the {backend.name} backend takes none")
    if backend.uri and options.hypervisor is None:
        raise ValueError(
            f"the {backend.name} backend needs hypervisor=URI (e.g. qemu:///system)"
        )
    for option, value, capability in (
        ("ports", options.ports, Capability.PORT_FORWARD),
        ("share", options.share, Capability.SHARE),
    ):
        if value and capability not in backend.capabilities:
            raise ValueError(f"{option}: {unsupported(backend.name, capability)}")
    return backend


register(Backend(
    "qemu", "pytest_adare.qemu.backend", frozenset(Capability),
    "QEMU started here, one process per VM: every capability, warm starts, LANs as host "
    "sockets",
))  # fmt: skip
register(Backend(
    "libvirt", "pytest_adare.libvirt_backend.backend",
    frozenset({Capability.SCREENDUMP, Capability.INPUT, Capability.SNAPSHOT,
               Capability.MEMORY_DUMP, Capability.DISK_EXPORT, Capability.LINK}),
    "a transient domain on a libvirt hypervisor (hypervisor=URI, local or remote), "
    "reached over its serial channel; LANs as libvirt networks", uri=True,
))  # fmt: skip
