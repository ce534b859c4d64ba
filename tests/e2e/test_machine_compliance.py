"""The QEMU backend does what its ``capabilities`` claim, on one boot of the built-in
console image (the protocol's signatures:
``tests/unit/pytest_adare/machine/test_machine_protocol_compliance.py``).

One module-scoped machine; each claimed capability is one test, the reset last (it
restarts the guest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine.base import Capability
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.accel import AccelChoice
from pytest_adare.machine_tools.port_forward import PortForwards
from pytest_adare.machine_tools.qga import QGAClient
from pytest_adare.qemu.argv import build_qemu_argv
from pytest_adare.qemu.machine import Machine

pytestmark = pytest.mark.e2e

ORDER = [
    Capability.SCREENDUMP, Capability.INPUT, Capability.SNAPSHOT, Capability.MEMORY_DUMP,
    Capability.NETWORK_CAPTURE, Capability.DISK_EXPORT, Capability.LINK,
    Capability.MIGRATION, Capability.KEEP, Capability.PORT_FORWARD, Capability.SHARE,
    Capability.RESET,
]  # fmt: skip


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    workdir = tmp_path_factory.mktemp("vm")
    booted = Machine(image_under_test(), workdir, MachineSpec(name="compliance"))
    booted.start()
    qga = QGAClient(booted.qga_path)
    qga.sync(timeout=180)
    qga.close()
    yield booted
    booted.shutdown()


def run(coro: object) -> object:
    return shared_loop().run(coro, 300)  # type: ignore[arg-type]


def test_the_qemu_backend_claims_every_capability() -> None:
    assert set(ORDER) == set(Capability) == Machine.capabilities


async def _capture(machine: Machine, path: Path) -> int:
    async with machine.network_capture(path) as capture:
        await machine.aset_link(True)  # some traffic is not needed: the header is written
    assert not capture.active
    return (await asyncio.to_thread(path.stat)).st_size


async def _forward(machine: Machine) -> int:
    forwards = PortForwards()
    await forwards.bind(machine)
    forward = await forwards.add(8080)
    await forwards.remove(8080)
    return forward.host_port


@pytest.mark.parametrize("capability", ORDER, ids=lambda c: c.name.lower())
def test_each_claimed_capability_works(
    machine: Machine, capability: Capability, tmp_path: Path
) -> None:
    assert capability in machine.capabilities
    if capability is Capability.SCREENDUMP:
        png = run(machine.ascreendump_png())
        assert isinstance(png, bytes) and png.startswith(b"\x89PNG")
        assert machine.screendump().width >= 320
    elif capability is Capability.INPUT:
        machine.send_keys("shift")
        machine.mouse_move(100, 100, screen=(640, 480))
        run(machine.atype_text("x"))
    elif capability is Capability.SNAPSHOT:
        machine.savevm("compliance")
        machine.loadvm("compliance")
    elif capability is Capability.MEMORY_DUMP:
        dump = run(machine.adump_memory(tmp_path / "memory.elf"))
        assert (tmp_path / "memory.elf").read_bytes()[:4] == b"\x7fELF", dump
    elif capability is Capability.NETWORK_CAPTURE:
        assert run(_capture(machine, tmp_path / "net.pcap")) >= 24  # the pcap header
    elif capability is Capability.DISK_EXPORT:
        run(machine.aexport_disk(tmp_path / "disk.qcow2", "qcow2"))
        assert (tmp_path / "disk.qcow2").read_bytes()[:4] == b"QFI\xfb"
    elif capability is Capability.LINK:
        run(machine.aset_link(False))
        run(machine.aset_link(True))
    elif capability is Capability.MIGRATION:
        size = run(machine.asave_state(tmp_path / "state.bin"))
        assert isinstance(size, int) and size > 1 << 20
        run(machine.aresume())
        assert machine.qmp("query-status")["status"] == "running"
    elif capability is Capability.KEEP:
        hint = machine.keep_hint(tmp_path, "ready")
        assert f"{tmp_path}/qmp.sock,server=on" in hint and "-loadvm ready" in hint
    elif capability is Capability.PORT_FORWARD:
        assert 0 < int(run(_forward(machine))) < 65536  # type: ignore[call-overload]
    elif capability is Capability.SHARE:
        # A share disk is attached at boot (tests/e2e/test_share.py boots one and reads it):
        # here, that the machine's command line carries it read-only after the system disk.
        share = tmp_path / "share0.raw"
        spec = MachineSpec(name="share", share_disks=(share,))
        sharing = Machine(image_under_test(), tmp_path / "vm", spec)
        argv = build_qemu_argv(sharing.config(AccelChoice("tcg", None, "tcg")))
        assert f"file={share},format=raw,if=none,id=share0,readonly=on" in argv
    elif capability is Capability.RESET:
        started = time.monotonic()
        machine.reset(timeout=120)
        assert machine.is_running(), time.monotonic() - started
    assert machine.is_running()
