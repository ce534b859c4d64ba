"""No leftovers on the hypervisor: names that say who owns a domain, and a reaper.

A VM's domain is named ``adare-<host tag>-<pid>-<random>`` (:func:`new_domain_name`) and
its volumes start with that name; a LAN's isolated network is named the same way with
``-lan<N>`` after it (:func:`new_network_name`). A run that was killed (SIGKILL, a crash,
a lost CI runner) cannot clean up; the next VM started from the same host removes every
domain, per-VM volume and network whose owner process on this host is gone
(:func:`reap`). Those of other hosts, of live processes, and base volumes are never
touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_adare.libvirt_backend.connection import libvirt_module

_OWNED = re.compile(r"adare-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-[0-9a-f]{8}")
_VM_VOLUME = re.compile(r"(?P<domain>adare-[0-9a-f]{8}-[0-9]{1,10}-[0-9a-f]{8})-(overlay|initrd)\.")
_NETWORK = re.compile(r"(?P<domain>adare-[0-9a-f]{8}-[0-9]{1,10}-[0-9a-f]{8})-lan[0-9]{1,3}")


def host_tag(hostname: str | None = None) -> str:
    """Eight hex digits naming this host (a hash: host names may hold anything)."""
    name = socket.gethostname() if hostname is None else hostname
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def new_domain_name(pid: int | None = None) -> str:
    """A fresh domain name owned by this process, e.g. ``adare-1a2b3c4d-4242-9f8e7d6c``."""
    return f"adare-{host_tag()}-{os.getpid() if pid is None else pid}-{os.urandom(4).hex()}"


def new_network_name(lan: int, pid: int | None = None) -> str:
    """A fresh name for the network of this process's ``lan``-th LAN, e.g.
    ``adare-1a2b3c4d-4242-9f8e7d6c-lan0``."""
    return f"{new_domain_name(pid)}-lan{int(lan)}"


@dataclass(frozen=True)
class Owner:
    """Who made a domain or volume: a host tag and a process id there."""

    host: str
    pid: int


def owner_of(name: str) -> Owner | None:
    """The owner named in a domain, per-VM volume or network name; None for anything else."""
    match = _OWNED.fullmatch(name)
    if match is None:
        named = _VM_VOLUME.match(name) or _NETWORK.fullmatch(name)
        match = None if named is None else _OWNED.fullmatch(named.group("domain"))
    if match is None:
        return None
    return Owner(match.group("host"), int(match.group("pid")))


def process_alive(pid: int) -> bool:
    """True while a process with ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_orphan(name: str, here: str, alive: Callable[[int], bool] = process_alive) -> bool:
    """True for a domain, per-VM volume or network made on host ``here`` by a process
    now gone."""
    owner = owner_of(name)
    return owner is not None and owner.host == here and not alive(owner.pid)


def reap(conn: Any, pool: Any) -> list[str]:
    """Destroy orphaned domains, delete orphaned per-VM volumes, destroy orphaned
    networks (after the domains that were on them); their names."""
    libvirt = libvirt_module()
    here = host_tag()
    removed: list[str] = []
    for domain in conn.listAllDomains(0):
        if is_orphan(domain.name(), here):
            with contextlib.suppress(libvirt.libvirtError):
                domain.destroy()
                removed.append(domain.name())
    removed += reap_networks(conn, here)
    with contextlib.suppress(libvirt.libvirtError):
        pool.refresh(0)
    for name in pool.listVolumes():
        if is_orphan(name, here):
            with contextlib.suppress(libvirt.libvirtError):
                pool.storageVolLookupByName(name).delete(0)
                removed.append(name)
    return removed


def reap_networks(conn: Any, here: str | None = None) -> list[str]:
    """Remove the orphaned LAN networks (transient: destroying one removes it); their names."""
    libvirt = libvirt_module()
    host = host_tag() if here is None else here
    removed: list[str] = []
    for network in conn.listAllNetworks(0):
        if is_orphan(network.name(), host):
            with contextlib.suppress(libvirt.libvirtError):
                if network.isPersistent():
                    network.undefine()
                if network.isActive():
                    network.destroy()
                removed.append(network.name())
    return removed
