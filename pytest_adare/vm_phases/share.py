"""The ``share`` phase: each read-only share made into its disk before QEMU starts
(:mod:`pytest_adare.machine_tools.share` says why a disk), and every share mounted in the
guest once the agent is up, before the test starts: a read-only one from its disk, a
writable one over virtiofs by its tag (the backend serves the folder itself, see
:mod:`pytest_adare.qemu.virtiofs`).

A VM with a share always boots cold: a saved ready state has no such disk, and QEMU
cannot save a VM with a virtiofs device at all.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from pathlib import Path

from pytest_adare.host_access import ShareSpec, read_only_shares, writable_shares
from pytest_adare.machine.spec import shared_folder_tag
from pytest_adare.machine_tools.share import ShareError, build_share_disk, mount_command
from pytest_adare.vm_phases.state import VMState

MOUNT_TIMEOUT = 120.0


async def build_shares(vm: VMState) -> tuple[Path, ...]:
    """The VM's read-only share disks, made in its workdir (none without such shares).

    :raise ShareError: a folder could not be copied (too large, mkfs.ext4 failed).
    """
    copies = read_only_shares(vm.options.share)
    if not copies:
        return ()
    t = time.monotonic()
    await asyncio.to_thread(vm.workdir.mkdir, parents=True, exist_ok=True)
    disks = []
    for index, spec in enumerate(copies):
        path = vm.workdir / f"share{index}.raw"
        disks.append(await asyncio.to_thread(build_share_disk, spec, path))
    vm.record("share", t, ", ".join(f"{s.host} copied for {s.guest}" for s in copies))
    return tuple(disks)


def virtiofs_mount_command(spec: ShareSpec, index: int) -> str:
    """The guest shell command mounting writable share ``index`` at ``spec.guest``."""
    target = shlex.quote(spec.guest)
    return (
        "modprobe virtiofs 2>/dev/null; "
        f"mkdir -p {target} && mount -t virtiofs -o nodev {shared_folder_tag(index)} {target}"
    )


async def mount_shares(vm: VMState) -> None:
    """Mount each share at its guest path; the guest facade then leaves them out of
    file-system snapshots.

    :raise ShareError: a mount failed (the guest's words).
    """
    if not vm.options.share:
        return
    t = time.monotonic()
    guest = vm.guest.aio
    shares = vm.options.share
    commands = [
        *((spec, mount_command(spec, i)) for i, spec in enumerate(read_only_shares(shares))),
        *(
            (spec, virtiofs_mount_command(spec, i))
            for i, spec in enumerate(writable_shares(shares))
        ),
    ]
    for spec, command in commands:
        result = await guest.shell(command, admin=True, timeout=MOUNT_TIMEOUT)
        if not result.ok:
            said = (result.stderr or result.stdout).strip()[-300:]
            raise ShareError(f"share {spec.host}: mounting it at {spec.guest} failed: {said}")
    guest.shared_paths = tuple(spec.guest for spec, _ in commands)
    vm.record(
        "mount", t,
        ", ".join(f"{s.guest} ({'writable' if s.writable else 'read-only'})" for s, _ in commands),
    )  # fmt: skip
