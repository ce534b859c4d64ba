"""Every machine class implements :class:`~pytest_adare.machine.base.MachineBackend`:
each protocol method exists with the protocol's parameters (names, kinds, defaults
given or not) and is async exactly where the protocol's is. ``mypy --strict`` checks
the types (the factories return the protocol; the fake assigns itself to it); this
checks what a runtime sees, so a backend cannot drift in a way mypy lets pass
(``**kwargs`` catch-alls, a missing default). The libvirt class is checked here
statically; QEMU's claimed capabilities are exercised on a real boot in
``tests/e2e/test_machine_compliance.py``.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_adare.libvirt_backend.machine import LibvirtMachine
from pytest_adare.machine import registry
from pytest_adare.machine.base import (
    PROTOCOL_METHODS,
    Capability,
    MachineBackend,
    MachineFactory,
    UnsupportedFeature,
)
from pytest_adare.machine.registry import Backend, backend_for, backend_named, backends
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.vm_options import VMOptions
from tests.fakes.machine import FakeMachine

IMAGE = SimpleNamespace(
    disk="disk.qcow2", format="qcow2", kernel="vmlinuz", initrd=None, append=None,
    desktop=False, memory_mib=None,
)  # fmt: skip
URI = "qemu:///system"


def _fake_factory(options: VMOptions, serial_device: str | None) -> MachineFactory:
    del options, serial_device

    def make(image: Any, workdir: Path, spec: MachineSpec) -> MachineBackend:
        return FakeMachine(image, workdir, spec=spec)

    return make


@pytest.fixture(autouse=True, scope="module")
def fake_backend() -> Iterator[Backend]:
    """A third backend, added the way a new one is: one module, one registry entry."""
    module = types.ModuleType("tests_fake_backend")
    module.machine_factory = _fake_factory  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        entry = Backend("fake", module.__name__, FakeMachine.capabilities, "a test's fake")
        with registry.registered(entry):
            yield entry
    finally:
        del sys.modules[module.__name__]


def options_for(backend: Backend) -> VMOptions:
    return VMOptions.from_given(
        {"backend": backend.name, "hypervisor": URI if backend.uri else None}
    )


def unstarted(backend: Backend, tmp_path: Path) -> Any:
    factory = backend.machine_factory(options_for(backend), None)
    return factory(cast(Any, IMAGE), tmp_path, MachineSpec(name="compliance"))


def machine_class(backend: Backend, tmp_path: Path) -> type:
    return type(unstarted(backend, tmp_path))


def test_the_registry_holds_the_shipped_backends_and_the_registered_fake() -> None:
    assert [b.name for b in backends()] == ["qemu", "libvirt", "fake"]
    with pytest.raises(ValueError, match=r"'xen' \(backends: qemu, libvirt, fake\)"):
        backend_named("xen")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(backend_named("qemu"))


def shape(function: Any) -> list[tuple[str, Any, bool]]:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # self
    return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in parameters]


def test_the_protocol_names_every_part_of_the_contract() -> None:
    assert {"start", "paused", "asave_state", "adump_memory", "network_capture",
            "aset_link", "keep_hint", "await_for_console"} <= set(PROTOCOL_METHODS)  # fmt: skip


@pytest.mark.parametrize("name", ["qemu", "libvirt", "fake"])
def test_each_protocol_method_has_the_protocols_parameters_and_async_kind(
    name: str, tmp_path: Path
) -> None:
    cls = machine_class(backend_named(name), tmp_path)
    for name in PROTOCOL_METHODS:
        wanted = getattr(MachineBackend, name)
        got = getattr(cls, name, None)
        assert got is not None, f"{cls.__name__}.{name} is missing"
        assert shape(got) == shape(wanted), f"{cls.__name__}.{name}{inspect.signature(got)}"
        is_async = inspect.iscoroutinefunction(inspect.unwrap(got))
        assert is_async == inspect.iscoroutinefunction(wanted), f"{cls.__name__}.{name}"


@pytest.mark.parametrize("name", ["qemu", "libvirt", "fake"])
def test_an_unstarted_machine_has_the_protocols_attributes(name: str, tmp_path: Path) -> None:
    backend = backend_named(name)
    machine = unstarted(backend, tmp_path)
    cls = type(machine)
    # Not isinstance(): that would read properties an unstarted machine may refuse.
    attributes = [*MachineBackend.__annotations__, "agent_serial_path", "qga_path"]
    for name in attributes:
        assert name in vars(machine) or hasattr(cls, name), f"{cls.__name__}.{name}"
    assert isinstance(machine.capabilities, frozenset)
    assert all(isinstance(c, Capability) for c in machine.capabilities)
    assert machine.backend == backend.name and machine.name == "compliance"
    # The registry's claim is what the machines can have (a remote libvirt host: fewer).
    assert machine.capabilities <= backend.capabilities
    assert not machine.is_running()


@pytest.mark.asyncio
async def test_a_feature_the_libvirt_backend_lacks_fails_with_one_message_naming_both(
    tmp_path: Path,
) -> None:
    machine = unstarted(backend_named("libvirt"), tmp_path)
    missing = set(Capability) - machine.capabilities
    assert missing >= {Capability.MIGRATION, Capability.NETWORK_CAPTURE, Capability.KEEP}
    calls = {
        Capability.MIGRATION: lambda: machine.asave_state(tmp_path / "state"),
        Capability.RESET: lambda: machine.areset(),
        Capability.LINK: lambda: machine.aset_link(False),
    }
    for capability, call in calls.items():
        with pytest.raises(UnsupportedFeature) as raised:
            await call()
        assert str(raised.value) == f"{capability.value}: not supported on the libvirt backend"
    with pytest.raises(UnsupportedFeature, match=r"a network capture .*libvirt backend"):
        machine.network_capture(tmp_path / "net.pcap")
    with pytest.raises(UnsupportedFeature, match=r"--adare-keep.*libvirt backend"):
        machine.keep_hint(tmp_path, None)


def test_the_libvirt_backend_refuses_what_it_cannot_boot_in_the_same_format(
    tmp_path: Path,
) -> None:
    with pytest.raises(UnsupportedFeature, match=r"^UEFI firmware: not supported on the libvirt"):
        LibvirtMachine(cast(Any, IMAGE), tmp_path, MachineSpec(firmware="uefi"), uri=URI)
    # Every spec field the domain does not honour is refused, in one message.
    spec = MachineSpec(rtc_base="2024-03-01T09:00:00", share_disks=(Path("/s.raw"),))
    with pytest.raises(UnsupportedFeature) as raised:
        LibvirtMachine(cast(Any, IMAGE), tmp_path, spec, uri=URI)
    assert str(raised.value) == (
        "a scenario clock, a shared folder: not supported on the libvirt backend"
    )


def test_the_options_choose_the_backend_and_it_checks_what_they_ask() -> None:
    assert backend_for(VMOptions()).name == "qemu"
    assert backend_for(VMOptions.from_given({"hypervisor": URI})).name == "libvirt"
    assert backend_for(VMOptions.from_given({"backend": "fake"})).name == "fake"
    with pytest.raises(ValueError, match="no backend named 'xen'"):
        backend_for(VMOptions(backend="xen"))
    with pytest.raises(ValueError, match=r"needs hypervisor=URI"):
        backend_for(VMOptions.from_given({"backend": "libvirt", "transport": "serial"}))
    with pytest.raises(ValueError, match="the qemu backend takes none"):
        backend_for(VMOptions.from_given({"backend": "qemu", "hypervisor": URI}))
    with pytest.raises(ValueError, match="expected a backend name"):
        VMOptions.from_given({"backend": "Qemu; rm"})


def test_a_registered_backend_runs_a_vm_through_the_registry(tmp_path: Path) -> None:
    # The VM never names a backend: the fake's factory is what the options chose.
    from pytest_adare.image.manifest import ImageManifest
    from pytest_adare.vm import VM

    image = ImageManifest(name="t", disk=tmp_path / "disk.qcow2", kernel=tmp_path / "vmlinuz")
    vm = VM(image, tmp_path, VMOptions.from_given({"backend": "fake"}))
    assert vm.state.backend.name == "fake"
    assert isinstance(vm.state.new_machine(image, tmp_path, MachineSpec()), FakeMachine)


def test_a_lan_is_the_backends_own_network_or_forwarded_by_the_host() -> None:
    # QEMU: no network of its own (the host forwards between sockets); libvirt makes one.
    assert backend_named("qemu").lan_network(VMOptions(), 0) is None
    assert callable(getattr(backend_named("libvirt").load(), "lan_network", None))
    assert backend_named("fake").lan_network(VMOptions(), 0) is None
