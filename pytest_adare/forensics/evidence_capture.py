"""Everything the hypervisor can take at one moment: RAM, disk, the pcap so far.

:func:`capture_evidence` reads the guest's clock (qemu-ga ``guest-get-time``), quiesces
its file systems, pauses it once, writes what was asked into ``dest`` (the memory dump,
the disk, a copy of each running network capture), and resumes and thaws it. What it
returns is plain data; the manifest is written by
:mod:`pytest_adare.forensics.evidence_bundle`.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_adare.errors import QGAError
from pytest_adare.machine.base import MachineBackend
from pytest_adare.machine.quiesce import quiesced
from pytest_adare.machine.results import DiskFormat, DumpFormat, Flush, FreezeAgent

MEMORY_NAME = "memory.{fmt}"
DISK_NAME = "disk.{fmt}"


@dataclass
class CapturedEvidence:
    """What one capture took: files by kind, the clocks, and notes on what was not taken."""

    files: list[tuple[str, Path]] = field(default_factory=list)
    host_time: float = 0.0
    """Host epoch seconds when the guest was paused."""
    guest_time: float | None = None
    """Guest epoch seconds (qemu-ga ``guest-get-time``) read just before the freeze."""
    host_time_at_guest_read: float | None = None
    quiesced: str = ""
    qemu_version: str = ""
    notes: list[str] = field(default_factory=list)


async def guest_clock(qga: FreezeAgent | None) -> tuple[float | None, float, str | None]:
    """(guest epoch seconds or None, host epoch seconds, why it is unknown or None)."""
    if qga is None:
        return None, time.time(), "no qemu-ga: guest clock not read"
    try:
        nanoseconds = await qga.execute("guest-get-time", timeout=10.0)
    except QGAError as error:
        return None, time.time(), f"guest clock not read: {str(error).splitlines()[0]}"
    return int(nanoseconds) / 1e9, time.time(), None


async def capture_evidence(
    machine: MachineBackend,
    dest: Path,
    *,
    memory: bool = True,
    memory_format: DumpFormat = "elf",
    disk: bool = True,
    disk_format: DiskFormat = "raw",
    pcap: bool = True,
    qga: FreezeAgent | None = None,
    flush: Flush | None = None,
) -> CapturedEvidence:
    """Take what was asked into ``dest`` (created; must not hold those files yet)."""
    _make_dir(dest)
    captured = CapturedEvidence(qemu_version=await machine.ahypervisor_version())
    guest_time, host_read, why = await guest_clock(qga)
    captured.guest_time, captured.host_time_at_guest_read = guest_time, host_read
    if why:
        captured.notes.append(why)
    freeze_agent = qga if disk else None
    async with quiesced(freeze_agent, flush if disk else None) as how, machine.paused() as at:
        captured.quiesced, captured.host_time = how, at
        if memory:
            target = dest / MEMORY_NAME.format(fmt=memory_format.replace("-", "."))
            await machine.adump_memory(target, memory_format)
            captured.files.append(("memory", target))
        if disk:
            target = dest / DISK_NAME.format(fmt=disk_format)
            # Inside the one pause: the export's own pause and quiesce are no-ops here.
            await machine.aexport_disk(target, disk_format)
            captured.files.append(("disk", target))
        if pcap:
            _copy_captures(machine, dest, captured)
    return captured


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _copy_captures(machine: MachineBackend, dest: Path, captured: CapturedEvidence) -> None:
    running = machine.active_captures()
    if not running:
        captured.notes.append(
            "pcap: no network capture was running (vm.network_capture or --adare-pcap)"
        )
    for index, capture in enumerate(running):
        target = dest / (f"network-{index}.pcap" if index else "network.pcap")
        # QEMU writes each frame with one unbuffered writev: paused, the file is whole.
        shutil.copyfile(capture.path, target)
        captured.files.append(("pcap", target))


__all__ = ["CapturedEvidence", "capture_evidence", "guest_clock"]
