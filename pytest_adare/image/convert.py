"""Disks in formats that block snapshots, converted once to qcow2 (cached).

QEMU's vmdk, vdi, vhdx and vpc drivers register a migration blocker, and ``savevm``
refuses to run while one exists ("The vmdk format used by node … does not support
live migration"), even when that disk is only the read-only backing file of a qcow2
overlay. Snapshot isolation needs ``savevm``, so such a disk is converted to qcow2
once, cached by its path, size and modification time, and used as the backing file
instead::

    manifest = replace(manifest, disk=qcow2_copy(manifest.disk, "vmdk"), format="qcow2")
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path

from pytest_adare.cache_dir import cache_root, exclusive_lock
from pytest_adare.errors import ImageError

SNAPSHOT_BLOCKING_FORMATS = ("vmdk", "vdi", "vhdx", "vpc")
"""Formats whose QEMU driver blocks migration, hence ``savevm``."""
CONVERT_TIMEOUT = 1800.0


def converted_root() -> Path:
    """Where the converted copies live: ``<cache>/converted``."""
    return cache_root() / "converted"


def qcow2_copy(disk: Path, fmt: str, progress: Callable[[str], None] | None = None) -> Path:
    """A qcow2 copy of ``disk`` (format ``fmt``), made on first use and then reused.

    :raise ImageError: ``qemu-img convert`` failed (its message included).
    """
    disk = disk.resolve()
    stat = disk.stat()
    key = hashlib.sha256(f"{disk}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    out = converted_root() / f"{disk.stem}-{key[:16]}.qcow2"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out.with_suffix(".lock"), CONVERT_TIMEOUT, f"the conversion of {disk}"):
        if out.is_file():
            return out
        if progress is not None:
            progress(f"converting {disk.name} ({fmt}) to qcow2 once: QEMU's {fmt} driver "
                     "blocks the snapshots that isolate tests")  # fmt: skip
        part = out.with_suffix(".part")
        cmd = ["qemu-img", "convert", "-f", fmt, "-O", "qcow2", str(disk), str(part)]
        try:
            subprocess.run(cmd, capture_output=True, text=True, timeout=CONVERT_TIMEOUT,
                           check=True)  # fmt: skip
        except subprocess.CalledProcessError as exc:
            part.unlink(missing_ok=True)
            raise ImageError(f"qemu-img cannot convert {disk}: {exc.stderr.strip()}") from exc
        part.replace(out)
    return out
