"""What a test's host code may reach of a guest, and what of the host the guest may see:
forwarded guest ports (:class:`PortSpec`) and shared host folders (:class:`ShareSpec`).

A leaf: parsing and checking only, so :mod:`pytest_adare.vm_options` can refuse bad input
before anything boots. The QEMU side is :mod:`pytest_adare.machine_tools.port_forward` and
:mod:`pytest_adare.machine_tools.share`.

Example::

    parse_ports([80, "53/udp"])    # (PortSpec(80, 'tcp'), PortSpec(53, 'udp'))
    parse_share("/srv/project:/src")  # (ShareSpec('/srv/project', '/src'),)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, TypeAlias

PortProtocol = Literal["tcp", "udp"]
PROTOCOLS: tuple[PortProtocol, ...] = ("tcp", "udp")
MAX_FORWARDS = 64
"""Forwards one VM may have (each is a listening socket on the host)."""
MAX_SHARES = 8
_PORT_TEXT = re.compile(r"(?P<port>\d{1,5})(?:/(?P<protocol>[a-z]+))?")


@dataclass(frozen=True, order=True)
class PortSpec:
    """A guest port to forward from the host's IPv4 loopback: ``80`` or ``"53/udp"``."""

    port: int
    protocol: PortProtocol = "tcp"

    def __str__(self) -> str:
        return f"{self.port}/{self.protocol}"


def parse_port(value: object) -> PortSpec:
    """``80``, ``"80"``, ``"5432/tcp"`` or ``"53/udp"`` as a :class:`PortSpec`.

    :raise ValueError: not a port in 1-65535 with an optional ``/tcp`` or ``/udp``.
    """
    if isinstance(value, PortSpec):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a port is a number or 'PORT/tcp|udp', got {value!r}")
    match = _PORT_TEXT.fullmatch(str(value).strip().lower())
    if match is None:
        raise ValueError(f"a port is a number or 'PORT/tcp|udp', got {value!r}")
    protocol = match["protocol"] or "tcp"
    if protocol not in PROTOCOLS:
        raise ValueError(f"port {value!r}: protocol must be tcp or udp, got {protocol!r}")
    port = int(match["port"])
    if not 0 < port < 65536:
        raise ValueError(f"port {value!r} is out of range (1-65535)")
    return PortSpec(port, "udp" if protocol == "udp" else "tcp")


PortsInput: TypeAlias = str | int | PortSpec | Sequence[int | str | PortSpec]
"""What ``launch(ports=...)`` takes: ``[80, "53/udp"]``, ``"80,53/udp"``, one port."""


def parse_ports(value: object) -> tuple[PortSpec, ...]:
    """Several ports: a list, or text separated by commas (``"80,53/udp"``).

    :raise ValueError: a bad port, one given twice, or more than :data:`MAX_FORWARDS`.
    """
    items: list[object]
    if isinstance(value, str):
        items = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, (int, PortSpec)) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"ports are a list like [80, '53/udp'], got {value!r}")
    specs = [parse_port(item) for item in items]
    seen: set[PortSpec] = set()
    for spec in specs:
        if spec in seen:
            raise ValueError(f"port {spec} is forwarded twice")
        seen.add(spec)
    if len(specs) > MAX_FORWARDS:
        raise ValueError(f"at most {MAX_FORWARDS} forwarded ports, got {len(specs)}")
    return tuple(specs)


@dataclass(frozen=True)
class ShareSpec:
    """A host directory (absolute, resolved) mounted at ``guest`` (absolute) in the guest:
    a read-only copy made at the VM's start, or with ``writable`` the folder itself
    (virtiofs: the guest's writes land in it, the host's edits are seen at once)."""

    host: str
    guest: str
    writable: bool = False

    def __str__(self) -> str:
        return f"{self.host}:{self.guest}" + (":rw" if self.writable else "")


def read_only_shares(shares: Sequence[ShareSpec]) -> tuple[ShareSpec, ...]:
    """The shares the guest gets a copy of, in order (share disk ``i`` is the ``i``-th)."""
    return tuple(share for share in shares if not share.writable)


def writable_shares(shares: Sequence[ShareSpec]) -> tuple[ShareSpec, ...]:
    """The shares served as the folder itself, in order (virtiofs tag ``i`` is the
    ``i``-th)."""
    return tuple(share for share in shares if share.writable)


def share_entry(host: object, guest: object, mode: object = "ro") -> ShareSpec:
    """One share, checked: the host path an existing directory, the guest path absolute.

    :raise ValueError: naming the path that is wrong and why.
    """
    if not isinstance(host, (str, os.PathLike)) or not str(host):
        raise ValueError(f"share: the host path must be a directory path, got {host!r}")
    if not isinstance(guest, str):
        raise ValueError(f"share: the guest path must be a string, got {guest!r}")
    if mode not in ("ro", "rw"):
        raise ValueError(f"share {host}: the mode is ro or rw, got {mode!r}")
    where = Path(os.fspath(host)).expanduser()
    if not where.exists():
        raise ValueError(f"share: the host path {str(where)!r} does not exist")
    if not where.is_dir():
        raise ValueError(f"share: the host path {str(where)!r} is not a directory")
    target = PurePosixPath(guest)
    if not target.is_absolute():
        raise ValueError(f"share {host}: the guest path {guest!r} is not absolute")
    if str(target) == "/" or any(part in ("..", ".") for part in guest.split("/")):
        raise ValueError(f"share {host}: the guest path {guest!r} must be a directory below /")
    if any(c in guest for c in ",\n\t ") or any(c in str(where) for c in "\n"):
        raise ValueError(f"share {host}: paths may not hold spaces, commas or newlines")
    return ShareSpec(str(where.resolve()), str(target), writable=mode == "rw")


ShareInput: TypeAlias = str | Mapping[str, str] | Sequence[ShareSpec]
"""What ``launch(share=...)`` takes: ``{"./": "/src"}`` (``"/src:rw"`` for a writable
share) or ``"HOST:GUEST[:rw][,...]"``."""


def parse_share(value: object) -> tuple[ShareSpec, ...]:
    """Shares from a mapping ``{"./": "/src"}`` or text ``HOST:GUEST`` (several
    separated by commas); ``:ro`` (the default) or ``:rw`` may follow the guest path.

    :raise ValueError: a bad entry, or two shares at the same guest path.
    """
    entries: list[ShareSpec] = []
    if isinstance(value, Mapping):
        for host, guest in value.items():
            guest_path, _, mode = str(guest).partition(":")
            entries.append(share_entry(host, guest_path, mode or "ro"))
    elif isinstance(value, str):
        for text in (part.strip() for part in value.split(",") if part.strip()):
            host, sep, rest = text.partition(":")
            if not sep:
                raise ValueError(f"share {text!r}: expected HOST:GUEST")
            guest_path, _, mode = rest.partition(":")
            entries.append(share_entry(host, guest_path, mode or "ro"))
    elif isinstance(value, (list, tuple)) and all(isinstance(v, ShareSpec) for v in value):
        entries = list(value)
    else:
        raise ValueError(f"share is a mapping like {{'./': '/src'}} or text, got {value!r}")
    guests = [entry.guest for entry in entries]
    for guest in guests:
        if guests.count(guest) > 1:
            raise ValueError(f"share: two host folders at the guest path {guest}")
    if len(entries) > MAX_SHARES:
        raise ValueError(f"at most {MAX_SHARES} shares, got {len(entries)}")
    return tuple(entries)
