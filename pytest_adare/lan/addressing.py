"""The plan of one LAN segment, pure: its subnet, each member's address and MAC, and
the ``/etc/hosts`` every member gets. No I/O; bad input raises :class:`LanError` before
any VM starts.

Example::

    plan = LanPlan.create("10.77.0.0/24", lan_index=0)
    plan.add("server")                       # Member("server", "10.77.0.1", ...)
    plan.add("client")
    hosts_file(plan.members.values())        # "127.0.0.1 localhost\\n10.77.0.1 server\\n..."
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from pytest_adare.errors import AdareError

_HOSTNAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PRIVATE = tuple(
    ipaddress.IPv4Network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
MAX_MEMBERS = 254
QEMU_USER_NET = ipaddress.IPv4Network("10.0.2.0/24")
"""QEMU's user-mode network: a segment there would shadow a member's own internet NIC."""


class LanError(AdareError):
    """A LAN was asked for something it cannot be (a bad subnet, a duplicate name, a
    closed LAN, a guest that cannot be configured, a member that died)."""


@dataclass(frozen=True)
class Member:
    """One VM on one segment: its hostname, address (with the prefix length) and MAC."""

    name: str
    address: str
    prefix: int
    mac: str


def check_hostname(name: object) -> str:
    """``name`` when it is a valid host name (lower case letters, digits, inner ``-``).

    :raise LanError: it is not.
    """
    if not isinstance(name, str) or not _HOSTNAME.fullmatch(name):
        raise LanError(
            f"a LAN member's name is its hostname: 1-63 lower-case letters, digits and "
            f"inner '-', got {name!r}"
        )
    return name


def private_subnet(subnet: object) -> ipaddress.IPv4Network:
    """``subnet`` as an IPv4 network inside RFC 1918 space, with room for two members.

    :raise LanError: not an IPv4 network, host bits set, not private, too small, or
        QEMU's own user-mode network.
    """
    try:
        network = ipaddress.IPv4Network(str(subnet), strict=True)
    except ValueError as error:
        raise LanError(
            f"subnet {subnet!r} is not an IPv4 network like 10.77.0.0/24 ({error})"
        ) from None
    if not any(network.subnet_of(private) for private in _PRIVATE):
        raise LanError(
            f"subnet {subnet} is not private: use one inside 10.0.0.0/8, 172.16.0.0/12 or "
            "192.168.0.0/16, so no test traffic can look like a real host's"
        )
    if network.overlaps(QEMU_USER_NET):
        raise LanError(f"subnet {subnet} overlaps QEMU's user network {QEMU_USER_NET}")
    if network.prefixlen > 30:
        raise LanError(f"subnet {subnet} is too small for a LAN (at most /30: two members)")
    return network


@dataclass
class LanPlan:
    """Addresses handed out in order (``.1``, ``.2``, ...); MACs locally administered:
    ``02``, three random bytes per segment (two sessions' segments never look alike in a
    pcap), the segment's number and the member's."""

    network: ipaddress.IPv4Network
    lan_index: int
    salt: bytes = field(default_factory=lambda: os.urandom(3))
    members: dict[str, Member] = field(default_factory=dict)

    @classmethod
    def create(cls, subnet: object, lan_index: int) -> LanPlan:
        return cls(private_subnet(subnet), lan_index)

    @property
    def capacity(self) -> int:
        return min(self.network.num_addresses - 2, MAX_MEMBERS)

    def check_new(self, name: object) -> str:
        """:raise LanError: ``name`` is no hostname, is taken, or the subnet is full."""
        name = check_hostname(name)
        if name in self.members:
            raise LanError(f"the LAN already has a member named {name!r}")
        if len(self.members) >= self.capacity:
            raise LanError(
                f"subnet {self.network} is too small for another member "
                f"({self.capacity} addresses, all taken)"
            )
        return name

    def add(self, name: str) -> Member:
        """Plan ``name`` as the next member (see :meth:`check_new`)."""
        name = self.check_new(name)
        number = len(self.members) + 1
        address = str(self.network.network_address + number)
        octets = (0x02, *self.salt, self.lan_index & 0xFF, number)
        mac = ":".join(f"{octet:02x}" for octet in octets)
        member = Member(name, address, self.network.prefixlen, mac)
        self.members[name] = member
        return member

    def remove(self, name: str) -> None:
        self.members.pop(name, None)


def hosts_file(members: Iterable[Member]) -> str:
    """``/etc/hosts`` naming every member (the first address of a name wins)."""
    lines = ["127.0.0.1 localhost"]
    seen: set[str] = set()
    for member in members:
        if member.name not in seen:
            seen.add(member.name)
            lines.append(f"{member.address} {member.name}")
    return "\n".join(lines) + "\n"
