"""Evidence from a running VM: the agent's log, and the hypervisor's RAM, disk and
network as thin calls into the machine and :mod:`pytest_adare.forensics`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from pytest_adare.errors import AdareError
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.evidence_bundle import BundleFacts, write_bundle
from pytest_adare.forensics.evidence_capture import capture_evidence
from pytest_adare.machine.results import DiskFormat, DumpFormat
from pytest_adare.machine_tools.qga import AsyncQGAClient
from pytest_adare.vm_phases.delivery import await_qga
from pytest_adare.vm_phases.state import VMState

LOG_TIMEOUT = 20.0


async def agent_log_tail(vm: VMState, n: int) -> list[str]:
    """The last ``n`` lines of the agent's log: via the agent, else via QGA (the agent
    may be what broke), else one line saying why neither could read it."""
    log = vm.layout.log_path
    guest = vm.current_guest
    if guest is not None and vm.layout.os != "windows":
        with contextlib.suppress(AdareError):
            result = await guest.aio.shell(f"tail -n {int(n)} '{log}'", timeout=10)
            return result.stdout.splitlines()
    try:
        await await_qga(vm, LOG_TIMEOUT)
        data = await vm.qga.file_read(log, timeout=LOG_TIMEOUT)
    except AdareError as exc:
        return [f"(agent log unavailable: {str(exc).splitlines()[0]})"]
    return data.decode("utf-8", "replace").splitlines()[-n:]


def freezer(vm: VMState) -> AsyncQGAClient | None:
    """qemu-ga to freeze the file systems for a disk export (not on Windows guests)."""
    return vm.qga if vm.layout.os != "windows" else None


async def agent_sync(vm: VMState) -> None:
    """Without a freeze, the agent's ``sync`` flushes the guest's page cache first."""
    guest = vm.current_guest
    if guest is not None and vm.layout.os != "windows":
        await guest.aio.shell("sync", timeout=60)


async def export_disk(vm: VMState, path: str | Path, format: DiskFormat) -> Path:
    exported = await vm.machine.aexport_disk(
        path, format, qga=freezer(vm), flush=lambda: agent_sync(vm)
    )
    return exported.path


async def dump_memory(
    vm: VMState, path: str | Path, format: DumpFormat, resume: bool, timeout: float
) -> Path:
    dumped = await vm.machine.adump_memory(path, format, resume=resume, timeout=timeout)
    return dumped.path


async def collect_evidence(
    vm: VMState, target: Path, *, memory: bool, disk: bool, pcap: bool,
    fs_diff: FsDiff | None, test_id: str | None,
) -> dict[str, Any]:  # fmt: skip
    """Pause once, take what was asked, resume; write the bundle's manifest."""
    captured = await capture_evidence(
        vm.machine, target, memory=memory, disk=disk, pcap=pcap,
        qga=freezer(vm), flush=lambda: agent_sync(vm),
    )  # fmt: skip
    facts = BundleFacts(
        image_name=vm.manifest.name, image_disk_sha256=vm.manifest.disk_sha256,
        qemu_version=captured.qemu_version, qemu_argv=vm.machine.argv,
        host_at_pause=captured.host_time, guest_time=captured.guest_time,
        host_at_guest_read=captured.host_time_at_guest_read, quiesced=captured.quiesced,
        test_id=test_id, vm=dataclasses.asdict(vm.options), notes=captured.notes,
    )  # fmt: skip
    return await asyncio.to_thread(write_bundle, target, captured.files, facts, fs_diff)
