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
from typing import Any

from pytest_adare.errors import QGAError
from pytest_adare.qemu.capture import active_captures
from pytest_adare.qemu.disk_export import (
    DiskFormat,
    DiskMachine,
    Flush,
    FreezeAgent,
    convert_disk,
    quiesced,
)
from pytest_adare.qemu.memory_dump import DumpFormat, dump_guest_memory
from pytest_adare.qemu.run_state import paused

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


async def qemu_version(machine: DiskMachine) -> str:
    """``major.minor.micro (package)`` from QMP ``query-version``."""
    answer: dict[str, Any] = await machine.aqmp("query-version")
    numbers = answer.get("qemu", {})
    package = str(answer.get("package", "")).strip()
    version = f"{numbers.get('major')}.{numbers.get('minor')}.{numbers.get('micro')}"
    return f"{version} ({package})" if package else version


async def capture_evidence(
    machine: DiskMachine,
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
    captured = CapturedEvidence(qemu_version=await qemu_version(machine))
    guest_time, host_read, why = await guest_clock(qga)
    captured.guest_time, captured.host_time_at_guest_read = guest_time, host_read
    if why:
        captured.notes.append(why)
    freeze_agent = qga if disk else None
    async with quiesced(freeze_agent, flush if disk else None) as how, paused(machine) as at:
        captured.quiesced, captured.host_time = how, at
        if memory:
            target = dest / MEMORY_NAME.format(fmt=memory_format.replace("-", "."))
            await dump_guest_memory(machine, target, format=memory_format)
            captured.files.append(("memory", target))
        if disk:
            target = dest / DISK_NAME.format(fmt=disk_format)
            await convert_disk(
                machine.overlay_path, target, disk_format, console_tail=machine.console_tail
            )
            captured.files.append(("disk", target))
        if pcap:
            _copy_captures(machine, dest, captured)
    return captured


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _copy_captures(machine: DiskMachine, dest: Path, captured: CapturedEvidence) -> None:
    running = active_captures(machine)
    if not running:
        captured.notes.append(
            "pcap: no network capture was running (vm.network_capture or --adare-pcap)"
        )
    for index, capture in enumerate(running):
        target = dest / (f"network-{index}.pcap" if index else "network.pcap")
        # QEMU writes each frame with one unbuffered writev: paused, the file is whole.
        shutil.copyfile(capture.path, target)
        captured.files.append(("pcap", target))


__all__ = ["CapturedEvidence", "capture_evidence", "guest_clock", "qemu_version"]
