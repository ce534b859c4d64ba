"""The guest side of joining a segment: shell commands run through the agent.

Pure text builders (tested without a guest) and the one exit code that says the guest
lacks the ``ip`` tool. The NIC is found by its PCI slot (``/sys/bus/pci/devices/…``), so
its name (``eth1``, ``enp0s16``) does not matter. IPv6 is switched off on the segment's
NIC so it carries no router solicitations or duplicate-address probes the scenario did
not send.
"""

from __future__ import annotations

import shlex

from pytest_adare.lan.addressing import Member
from pytest_adare.lan.port import LanPort

NO_IP_TOOL = 127
NO_NIC = 3


def join_command(port: LanPort, member: Member, hosts: str) -> str:
    """Configure the NIC of ``port`` as ``member`` (static address, MAC, link up), set
    the hostname and ``/etc/hosts`` to ``hosts``; prints the NIC's name.

    Few processes (each one is slow under TCG): the NIC is found by a glob, the
    hostname written to ``/proc``, and three ``ip`` calls do the rest. The guest's init
    may have put its user-network address on the NIC at boot (it is the only NIC a
    member without internet has), so that is flushed first; the MAC changes while the
    link is up (virtio-net allows it).
    """
    sysfs = f"/sys/bus/pci/devices/0000:00:{port.slot:02x}.0"
    address = f"{member.address}/{member.prefix}"
    return "\n".join([
        f"command -v ip >/dev/null 2>&1 || exit {NO_IP_TOOL}",
        "dev=",
        f'for path in {sysfs}/virtio*/net/*; do [ -e "$path" ] && dev=${{path##*/}}; break; done',
        f'[ -n "$dev" ] || exit {NO_NIC}',
        "set -e",
        'echo 1 > "/proc/sys/net/ipv6/conf/$dev/disable_ipv6" 2>/dev/null || true',
        'ip addr flush dev "$dev"',
        f'ip link set dev "$dev" address {member.mac} up',
        f'ip addr add {address} dev "$dev"',
        f"echo {shlex.quote(member.name)} > /proc/sys/kernel/hostname",
        f"echo {shlex.quote(member.name)} > /etc/hostname",
        hosts_command(hosts),
        'echo "$dev"',
    ])  # fmt: skip


def hosts_command(hosts: str) -> str:
    """Replace ``/etc/hosts`` with ``hosts``."""
    return f"printf '%s' {shlex.quote(hosts)} > /etc/hosts"
