"""A cached image's disk still hashes to the ``disk_sha256`` its manifest recorded.

Hashing a disk of several hundred MiB at every session would cost seconds, so the
first check by a user records the disk's signature (device, inode, size, mtime and
ctime, in nanoseconds) in that user's own cache, and a later check whose signature
matches reads no byte of the disk: a few ``stat`` calls. Anything that writes the
file, replaces it or sets its times back changes its ctime, which no ordinary user
can set, so a changed disk is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pytest_adare.cache_dir import cache_root
from pytest_adare.errors import ImageError, printable
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.manifest import ImageManifest

RECORDS_DIR = "verified-disks"


def _signature(info: os.stat_result) -> list[int]:
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _record_path(disk: Path) -> Path:
    key = hashlib.sha256(str(disk).encode()).hexdigest()[:32]
    return cache_root() / RECORDS_DIR / f"{key}.json"


def _recorded(record: Path) -> dict[str, object] | None:
    """This user's record, or None (missing, another's, or unreadable: hash again)."""
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd) as handle:
        if os.fstat(fd).st_uid != os.geteuid():
            return None
        try:
            data = json.loads(handle.read(4096))
        except (ValueError, UnicodeDecodeError):
            return None
    return data if isinstance(data, dict) else None


def _record(record: Path, data: dict[str, object]) -> None:
    """Write ``record`` atomically; a cache we cannot write only costs a hash next time."""
    try:
        record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, record)
    except OSError:
        return


def check_disk(manifest: ImageManifest, entry: Path) -> None:
    """Check ``manifest``'s disk against its ``disk_sha256`` (cheap when unchanged).

    :raise ImageError: the manifest records no hash, or the disk's differs (both named).
    """
    disk = manifest.disk
    if manifest.disk_sha256 is None:
        raise ImageError(
            f"the cached image {entry.name} is not booted: its manifest records no "
            "disk_sha256, which every image built into the cache has"
        )
    before = os.stat(disk)
    record = _record_path(disk)
    known = _recorded(record)
    if (
        known is not None
        and known.get("sha256") == manifest.disk_sha256
        and known.get("signature") == _signature(before)
    ):
        return
    found = file_sha256(disk)
    if found != manifest.disk_sha256:
        raise ImageError(
            f"the cached image {entry.name} is not booted: its disk {printable(str(disk))} "
            f"has sha256 {found}, its manifest says {printable(manifest.disk_sha256)} "
            "(the disk changed after it was built); build it again "
            "(adare-image build --force) or remove the entry"
        )
    # The signature from before the hash: a write during it leaves a record that no
    # longer matches, so the next check hashes again.
    _record(record, {"disk": str(disk), "sha256": found, "signature": _signature(before)})
