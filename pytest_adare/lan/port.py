"""One guest NIC on a LAN segment, as every layer sees it (a leaf: no imports of ours).

The QEMU backend spells it as ``-netdev dgram`` between two Unix datagram sockets: the
guest's end ``socket`` (QEMU binds it) and the segment's end ``peer`` (the host's
forwarder binds it); libvirt as an ``<interface type='network'>`` on ``network``. The
NIC sits in PCI slot ``slot``, so the guest finds it by its PCI address whatever its
name. Paths are strings so that the options stay JSON-friendly (evidence bundles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

LAN_FIRST_SLOT = 0x10
"""PCI slot of a VM's first LAN NIC (the next ones follow); far from the slots QEMU
numbers on its own."""
MAX_LAN_PORTS = 8

_MAC = re.compile(r"(?:[0-9a-f]{2}:){5}[0-9a-f]{2}")


@dataclass(frozen=True)
class LanPort:
    """One NIC of one VM on one segment.

    ``netdev`` is its id in the hypervisor (``lan0``, ``lan1``, ...; ``set_link`` and a
    capture name it), ``mac`` the member's address on the segment.
    """

    netdev: str
    slot: int
    mac: str
    socket: str = ""
    peer: str = ""
    network: str = ""
    """The libvirt network of the segment (libvirt backend only)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"lan[0-9]", self.netdev):
            raise ValueError(f"a LAN port's netdev id is lan0..lan9, got {self.netdev!r}")
        if not LAN_FIRST_SLOT <= self.slot < LAN_FIRST_SLOT + MAX_LAN_PORTS:
            raise ValueError(f"a LAN port's PCI slot is out of range: {self.slot:#x}")
        if not _MAC.fullmatch(self.mac):
            raise ValueError(f"not a MAC address: {self.mac!r}")
        if not (self.socket and self.peer) and not self.network:
            raise ValueError("a LAN port needs its sockets (QEMU) or a network (libvirt)")


def lan_port(
    index: int, mac: str, *, socket: str = "", peer: str = "", network: str = ""
) -> LanPort:
    """The ``index``-th LAN NIC of a VM (its netdev id and PCI slot follow from it)."""
    if not 0 <= index < MAX_LAN_PORTS:
        raise ValueError(f"a VM has at most {MAX_LAN_PORTS} LAN NICs")
    return LanPort(f"lan{index}", LAN_FIRST_SLOT + index, mac, socket, peer, network)


class HypervisorNetwork(Protocol):
    """A LAN segment when the backend provides it (a libvirt network): its name, which
    the members' NICs name, and how it goes away after the members."""

    name: str

    def close(self) -> None: ...
