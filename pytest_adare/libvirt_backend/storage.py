"""The ``adare`` storage pool on the hypervisor: what the domains' disks and boot files are.

Image files (disk, kernel, initrd) are uploaded once as volumes named by their sha256
(:func:`~.domain_xml.base_volume_name`) and reused by later runs and other runners; an
empty ``<name>.done`` volume is created when an upload completed, and an empty
``<name>.uploader-<host>-<pid>`` volume names the uploader meanwhile, so a torn upload
(the uploader was killed) is recognised, removed and uploaded again. Each VM gets a qcow2
overlay volume over the base disk (its snapshots live there) and, when the agent is
handed over in the initrd, its own initrd volume; both go when the VM closes.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pytest_adare.libvirt_backend.connection import HypervisorError, error_text, libvirt_module
from pytest_adare.libvirt_backend.domain_xml import (
    POOL_NAME,
    base_volume_name,
    build_overlay_volume_xml,
    build_pool_xml,
    build_raw_volume_xml,
    done_marker_name,
    uploader_marker_name,
    uploader_of,
    vm_volume_name,
)
from pytest_adare.libvirt_backend.reaper import host_tag, process_alive

UPLOAD_CHUNK = 1 << 20
UPLOAD_WAIT = 600.0
"""Bound on waiting for another runner's upload of the same base volume."""
SYSTEM_POOL_PATH = "/var/lib/libvirt/images/adare"
SESSION_POOL_PATH = "~/.local/share/libvirt/images/adare"
Progress = Callable[[str], None]


def pool_path(uri: str) -> str:
    """Where the pool is created on a hypervisor that has none yet."""
    return SESSION_POOL_PATH if uri.rstrip("/").endswith("/session") else SYSTEM_POOL_PATH


def ensure_pool(conn: Any, uri: str) -> Any:
    """The running ``adare`` pool, defined, built and started if needed.

    :raise VMLaunchError: the pool cannot be made (libvirt's reason).
    """
    libvirt = libvirt_module()
    try:
        try:
            pool = conn.storagePoolLookupByName(POOL_NAME)
        except libvirt.libvirtError:
            path = pool_path(uri)
            if path.startswith("~"):
                path = str(Path(path).expanduser())  # a session daemon runs as this user
            pool = conn.storagePoolDefineXML(build_pool_xml(path), 0)
            pool.build(0)
        if not pool.isActive():
            pool.create(0)
        pool.setAutostart(1)
        refresh_pool(pool)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"storage pool {POOL_NAME!r} on {uri}: {error_text(exc)}") from None
    return pool


def refresh_pool(pool: Any, *, wait: float = 0.0) -> None:
    """Re-read the pool's directory. While a volume is being made in the pool (another
    runner's ``createXML``, through the same daemon: its claim, its overlay) libvirt
    refuses ("pool has asynchronous jobs running"): without ``wait`` the refresh is left
    out, since the list the daemon holds is current for all that went through it (a
    volume made by ``createXML`` is in it at once); with ``wait`` (seconds) it is tried
    again until then, for a file the daemon wrote behind the pool's back (a memory dump).

    :raise libvirt.libvirtError: any other failure, or the jobs outlasted ``wait``.
    """
    libvirt = libvirt_module()
    deadline = time.monotonic() + wait
    while True:
        try:
            pool.refresh(0)
            return
        except libvirt.libvirtError as exc:
            if "asynchronous jobs running" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                if wait:
                    raise
                return
        time.sleep(0.2)


def file_digest(path: Path) -> str:
    """Hex sha256 of ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(UPLOAD_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def virtual_size(path: Path, fmt: str) -> int:
    """The guest-visible size of a disk file: qcow2's header field, else the file size."""
    if fmt != "qcow2":
        return path.stat().st_size
    with path.open("rb") as handle:
        header = handle.read(32)
    if len(header) < 32 or header[:4] != b"QFI\xfb":
        raise HypervisorError(f"{path} is not a qcow2 file (its header says otherwise)")
    return int(struct.unpack(">Q", header[24:32])[0])


def ensure_base_volume(
    pool: Any,
    kind: Literal["disk", "kernel", "initrd"],
    path: Path,
    sha256: str | None = None,
    progress: Progress | None = None,
) -> tuple[Any, bool]:
    """The pool's volume holding ``path``'s bytes (uploaded when missing) and whether it
    was uploaded now.

    Whoever creates the volume uploads it; an empty ``<name>.uploader-<host>-<pid>``
    volume, made before that claim and removed after ``<name>.done``, says who it is.
    Others wait for ``.done``; an upload whose uploader on this host is gone (killed
    mid-way) is removed and taken over at once, one of another host after
    :data:`UPLOAD_WAIT`.

    :raise HypervisorError: the upload failed or another runner's did not finish in time.
    """
    name = base_volume_name(kind, sha256 or file_digest(path))
    deadline = time.monotonic() + UPLOAD_WAIT
    while True:
        refresh_pool(pool)
        if _has_volume(pool, done_marker_name(name)):
            return pool.storageVolLookupByName(name), False
        volume = _claim(pool, name, path.stat().st_size)
        if volume is not None:
            break
        if upload_is_torn(pool, name) or time.monotonic() > deadline:
            _delete_quietly(pool, name)
            for marker in _uploader_markers(pool, name):
                _delete_quietly(pool, marker)
            deadline = time.monotonic() + UPLOAD_WAIT
            continue
        time.sleep(1.0)
    if progress is not None:
        progress(f"uploading {path.name} ({path.stat().st_size >> 20} MiB) as {name}")
    marker = uploader_marker_name(name, host_tag(), os.getpid())
    try:
        upload(volume, path)
        pool.createXML(build_raw_volume_xml(done_marker_name(name), 0), 0)
    except BaseException:
        _delete_quietly(pool, name)
        raise
    finally:
        _delete_quietly(pool, marker)
    return volume, True


def _claim(pool: Any, name: str, size: int) -> Any:
    """The new volume ``name`` (ours to fill), or None when it exists already."""
    libvirt = libvirt_module()
    marker = uploader_marker_name(name, host_tag(), os.getpid())
    try:
        pool.createXML(build_raw_volume_xml(marker, 0), 0)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"volume {marker}: {error_text(exc)}") from None
    try:
        return pool.createXML(build_raw_volume_xml(name, size), 0)
    except libvirt.libvirtError as exc:
        _delete_quietly(pool, marker)
        if _has_volume(pool, name):
            return None
        raise HypervisorError(f"volume {name}: {error_text(exc)}") from None


def _uploader_markers(pool: Any, name: str) -> list[str]:
    return [volume for volume in pool.listVolumes() if uploader_of(volume, name) is not None]


def upload_is_torn(pool: Any, name: str) -> bool:
    """True when nobody can still be uploading ``name``: no uploader marker, or only ones
    of processes on this host that are gone."""
    here = host_tag()
    owners = [uploader_of(marker, name) for marker in _uploader_markers(pool, name)]
    return all(
        owner is not None and owner.host == here and not process_alive(owner.pid)
        for owner in owners
    )


def upload(volume: Any, path: Path) -> None:
    """Write ``path``'s bytes into ``volume`` through a libvirt stream.

    :raise VMLaunchError: the stream failed (libvirt's reason).
    """
    libvirt = libvirt_module()
    conn = volume.connect()
    stream = conn.newStream(0)
    size = path.stat().st_size
    try:
        volume.upload(stream, 0, size, 0)
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(UPLOAD_CHUNK), b""):
                _send_all(stream, chunk)
        stream.finish()
    except libvirt.libvirtError as exc:
        stream.abort()
        raise HypervisorError(f"uploading {path} to {volume.name()}: {error_text(exc)}") from None


def _send_all(stream: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = stream.send(bytes(view[:UPLOAD_CHUNK]))
        if sent < 0:
            raise HypervisorError(f"the upload stream refused data (send returned {sent})")
        view = view[sent:]


def create_vm_volume(pool: Any, domain: str, backing: Any, fmt: str, size: int) -> Any:
    """The VM's qcow2 overlay over the base volume ``backing``.

    :raise VMLaunchError: libvirt could not create it.
    """
    libvirt = libvirt_module()
    name = vm_volume_name(domain, "overlay")
    try:
        return pool.createXML(build_overlay_volume_xml(name, backing.path(), fmt, size), 0)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"overlay volume {name}: {error_text(exc)}") from None


def upload_vm_file(pool: Any, domain: str, path: Path) -> Any:
    """A per-VM copy of a boot file (the initrd carrying the agent's token)."""
    libvirt = libvirt_module()
    name = vm_volume_name(domain, "initrd")
    try:
        volume = pool.createXML(build_raw_volume_xml(name, path.stat().st_size), 0)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"volume {name}: {error_text(exc)}") from None
    try:
        upload(volume, path)
    except BaseException:
        _delete_quietly(pool, name)
        raise
    return volume


def delete_vm_volumes(pool: Any, domain: str) -> None:
    """Remove the VM's overlay and initrd volumes (missing ones are fine)."""
    _delete_quietly(pool, vm_volume_name(domain, "overlay"))
    _delete_quietly(pool, vm_volume_name(domain, "initrd"))


def _has_volume(pool: Any, name: str) -> bool:
    return name in pool.listVolumes()


def _delete_quietly(pool: Any, name: str) -> None:
    libvirt = libvirt_module()
    try:
        pool.storageVolLookupByName(name).delete(0)
    except libvirt.libvirtError:
        pass
