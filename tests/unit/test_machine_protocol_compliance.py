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
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_adare.libvirt_backend.machine import LibvirtMachine
from pytest_adare.machine.base import (
    PROTOCOL_METHODS,
    Capability,
    MachineBackend,
    UnsupportedFeature,
)
from pytest_adare.qemu.machine import Machine
from tests.fakes.machine import FakeMachine

BACKENDS = [Machine, LibvirtMachine, FakeMachine]
IMAGE = SimpleNamespace(
    disk="disk.qcow2", format="qcow2", kernel="vmlinuz", initrd=None, append=None,
    desktop=False, memory_mib=None,
)  # fmt: skip


def unstarted(cls: type, tmp_path: Path) -> Any:
    if cls is LibvirtMachine:
        return LibvirtMachine(cast(Any, IMAGE), tmp_path, uri="qemu:///system")
    return cls(cast(Any, IMAGE), tmp_path)


def shape(function: Any) -> list[tuple[str, Any, bool]]:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # self
    return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in parameters]


def test_the_protocol_names_every_part_of_the_contract() -> None:
    assert {"start", "paused", "asave_state", "adump_memory", "network_capture",
            "aset_link", "keep_hint", "await_for_console"} <= set(PROTOCOL_METHODS)  # fmt: skip


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda cls: cls.__name__)
def test_each_protocol_method_has_the_protocols_parameters_and_async_kind(cls: type) -> None:
    for name in PROTOCOL_METHODS:
        wanted = getattr(MachineBackend, name)
        got = getattr(cls, name, None)
        assert got is not None, f"{cls.__name__}.{name} is missing"
        assert shape(got) == shape(wanted), f"{cls.__name__}.{name}{inspect.signature(got)}"
        is_async = inspect.iscoroutinefunction(inspect.unwrap(got))
        assert is_async == inspect.iscoroutinefunction(wanted), f"{cls.__name__}.{name}"


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda cls: cls.__name__)
def test_an_unstarted_machine_has_the_protocols_attributes(cls: type, tmp_path: Path) -> None:
    machine = unstarted(cls, tmp_path)
    # Not isinstance(): that would read properties an unstarted machine may refuse.
    attributes = [*MachineBackend.__annotations__, "agent_serial_path", "qga_path"]
    for name in attributes:
        assert name in vars(machine) or hasattr(cls, name), f"{cls.__name__}.{name}"
    assert isinstance(machine.capabilities, frozenset)
    assert all(isinstance(c, Capability) for c in machine.capabilities)
    assert machine.backend in {"qemu", "libvirt", "fake"}
    assert not machine.is_running()


@pytest.mark.asyncio
async def test_a_feature_the_libvirt_backend_lacks_fails_with_one_message_naming_both(
    tmp_path: Path,
) -> None:
    machine = unstarted(LibvirtMachine, tmp_path)
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
        LibvirtMachine(cast(Any, IMAGE), tmp_path, uri="qemu:///system", firmware="uefi")
