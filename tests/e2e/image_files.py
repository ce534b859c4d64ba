"""Files inside a built image's disk, read on the host with ``debugfs`` (no boot)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def raw_disk(disk: Path, scratch: Path) -> Path:
    """The qcow2 ``disk`` as a raw ext4 image in ``scratch`` (converted once)."""
    raw = scratch / f"{disk.parent.name}.raw"
    if not raw.exists():
        subprocess.run(["qemu-img", "convert", "-O", "raw", str(disk), str(raw)], check=True)
    return raw


def debugfs_stat(disk: Path, path: str, scratch: Path) -> dict[str, int]:
    """uid, gid and mode of ``path`` inside the qcow2 ``disk``'s ext4."""
    out = subprocess.run(
        ["debugfs", "-R", f"stat {path}", str(raw_disk(disk, scratch))],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    fields = out.split()
    assert "User:" in fields, f"debugfs found no {path}: {out[:300]}"
    return {
        "uid": int(fields[fields.index("User:") + 1]),
        "gid": int(fields[fields.index("Group:") + 1]),
        "mode": int(fields[fields.index("Mode:") + 1], 8),
    }


def debugfs_cat(disk: Path, path: str, scratch: Path) -> bytes:
    """The content of ``path`` inside the qcow2 ``disk``'s ext4 (b"" when it is missing)."""
    return subprocess.run(
        ["debugfs", "-R", f"cat {path}", str(raw_disk(disk, scratch))],
        capture_output=True, check=True,
    ).stdout  # fmt: skip


def debugfs_exists(disk: Path, path: str, scratch: Path) -> bool:
    """Whether ``path`` (any type, a symlink not followed) is inside the qcow2 ``disk``'s ext4."""
    done = subprocess.run(
        ["debugfs", "-R", f"stat {path}", str(raw_disk(disk, scratch))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return "Inode:" in done.stdout


def initramfs_stand_in_left(disk: Path, scratch: Path) -> list[str]:
    """What the build's stand-in for ``update-initramfs`` (image/rootfs.py: a diversion
    to ``/bin/true`` while packages go in) left in ``disk``: none of it may stay."""
    diverted = "/usr/sbin/update-initramfs.adare-build"
    left = [diverted] if debugfs_exists(disk, diverted, scratch) else []
    if b"update-initramfs" in debugfs_cat(disk, "/var/lib/dpkg/diversions", scratch):
        left.append("a diversion of update-initramfs in /var/lib/dpkg/diversions")
    return left
