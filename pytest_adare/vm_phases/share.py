"""The ``share`` phase: each shared host folder made into its read-only disk before QEMU
starts, and mounted in the guest once the agent is up, before the test starts
(:mod:`pytest_adare.qemu.share` says why a disk).

A VM with a share always boots cold: a saved ready state has no such disk.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pytest_adare.qemu.share import ShareError, build_share_disk, mount_command
from pytest_adare.vm_phases.state import VMState

MOUNT_TIMEOUT = 120.0


async def build_shares(vm: VMState) -> tuple[Path, ...]:
    """The VM's share disks, made in its workdir (none without ``share``).

    :raise ShareError: a folder could not be copied (too large, mkfs.ext4 failed).
    """
    if not vm.options.share:
        return ()
    t = time.monotonic()
    await asyncio.to_thread(vm.workdir.mkdir, parents=True, exist_ok=True)
    disks = []
    for index, spec in enumerate(vm.options.share):
        path = vm.workdir / f"share{index}.raw"
        disks.append(await asyncio.to_thread(build_share_disk, spec, path))
    vm.record("share", t, ", ".join(f"{s.host} copied for {s.guest}" for s in vm.options.share))
    return tuple(disks)


async def mount_shares(vm: VMState) -> None:
    """Mount each share read-only at its guest path; the guest facade then leaves them
    out of file-system snapshots.

    :raise ShareError: a mount failed (the guest's words).
    """
    if not vm.options.share:
        return
    t = time.monotonic()
    guest = vm.guest.aio
    for index, spec in enumerate(vm.options.share):
        result = await guest.shell(mount_command(spec, index), admin=True, timeout=MOUNT_TIMEOUT)
        if not result.ok:
            said = (result.stderr or result.stdout).strip()[-300:]
            raise ShareError(f"share {spec.host}: mounting it at {spec.guest} failed: {said}")
    guest.shared_paths = tuple(spec.guest for spec in vm.options.share)
    vm.record("mount", t, ", ".join(f"{s.guest} (read-only)" for s in vm.options.share))
