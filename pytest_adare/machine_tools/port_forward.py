"""Guest ports forwarded from the host's loopback over QEMU's user-mode NIC, at run time.

Each forward is added with HMP ``hostfwd_add`` after QEMU started (cold or warm: the
saved state of a warm start holds none, and slirp's forwards are host-side state that
``loadvm`` leaves alone, so they stay across per-test restores). The host port is 0:
QEMU's slirp binds a port the kernel picks, so parallel VMs and xdist workers never race
for one; it is read back from ``info usernet`` (the rows before and after differ by
exactly this forward, as forwards of one machine are added one at a time).

Example::

    forwards = PortForwards()
    await forwards.bind(machine)
    forward = await forwards.add(PortSpec(80))   # Forward(spec=80/tcp, host_port=43211)
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Protocol

from pytest_adare.errors import AdareError
from pytest_adare.host_access import MAX_FORWARDS, PortSpec, parse_port
from pytest_adare.machine.base import NETDEV_ID

HOST_ADDRESS = "127.0.0.1"
"""Forwards listen on the IPv4 loopback only: nothing off this host reaches the guest."""
_ROW = re.compile(
    r"(?P<protocol>TCP|UDP)\[HOST_FORWARD\]\s+\d+\s+(?P<host>\S+)\s+(?P<port>\d+)\s+\S+\s+"
    r"(?P<guest>\d+)"
)
HMP_TIMEOUT = 30.0


class PortForwardError(AdareError):
    """A forward that cannot be made, or a port asked for that is not forwarded."""


class HumanMonitor(Protocol):
    """What forwarding needs of a machine: HMP over QMP (the QEMU backend's
    :class:`~pytest_adare.qemu.machine.Machine`; ``Capability.PORT_FORWARD``)."""

    name: str

    async def ahmp(self, line: str, timeout: float = 60.0) -> str: ...


@dataclass(frozen=True)
class Forward:
    """One forward: the guest's ``spec`` reached at ``host:host_port`` on this host."""

    spec: PortSpec
    host_port: int
    host: str = HOST_ADDRESS

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.host_port)


def forwarded_rows(usernet: str) -> set[tuple[str, int, int]]:
    """``(protocol, host port, guest port)`` of each loopback forward in ``info usernet``.

    >>> sorted(forwarded_rows("  TCP[HOST_FORWARD]  11  127.0.0.1 42899  10.0.2.15  80  0  0"))
    [('tcp', 42899, 80)]
    """
    return {
        (match["protocol"].lower(), int(match["port"]), int(match["guest"]))
        for match in _ROW.finditer(usernet)
        if match["host"] == HOST_ADDRESS
    }


class PortForwards:
    """One VM's forwards: made on its current machine, asked for by guest port.

    A new machine (a reboot, a cold start after a failed warm one) is :meth:`bind`-ed and
    the forwards asked for so far are made again on it (new host ports)."""

    def __init__(self, netdev: str = NETDEV_ID) -> None:
        self._netdev = netdev
        self._machine: HumanMonitor | None = None
        self._why_not = "the VM has not started"
        self._forwards: dict[PortSpec, Forward] = {}
        self._lock = asyncio.Lock()

    @property
    def forwards(self) -> tuple[Forward, ...]:
        """The forwards now, ordered by guest port."""
        return tuple(self._forwards[spec] for spec in sorted(self._forwards))

    async def bind(
        self, machine: HumanMonitor | None, specs: tuple[PortSpec, ...] = (), why_not: str = ""
    ) -> None:
        """Use ``machine`` from now on: the earlier forwards and ``specs`` are made there.
        ``None``: this VM cannot forward (``why_not`` says why; asking then raises).

        :raise PortForwardError: QEMU refused one (the machine keeps the others).
        """
        wanted = [*self._forwards, *(s for s in specs if s not in self._forwards)]
        self._machine, self._forwards, self._why_not = machine, {}, why_not
        if machine is None and wanted:
            raise PortForwardError(f"cannot forward guest port {wanted[0]}: {why_not}")
        for spec in wanted:
            await self.add(spec)

    async def add(self, port: PortSpec | int | str) -> Forward:
        """Forward the guest's ``port`` to a free port on the host's loopback.

        :raise PortForwardError: already forwarded, too many, no machine, or QEMU's refusal.
        :raise ValueError: not a port (see :func:`~pytest_adare.host_access.parse_port`).
        """
        spec = parse_port(port)
        async with self._lock:
            machine = self._require_machine(spec)
            if spec in self._forwards:
                known = self._forwards[spec]
                raise PortForwardError(
                    f"guest port {spec} is already forwarded (to {known.host}:{known.host_port})"
                )
            if len(self._forwards) >= MAX_FORWARDS:
                raise PortForwardError(f"at most {MAX_FORWARDS} forwarded ports per VM")
            before = forwarded_rows(await machine.ahmp("info usernet", HMP_TIMEOUT))
            rule = f"{spec.protocol}:{HOST_ADDRESS}:0-:{spec.port}"
            said = (await machine.ahmp(f"hostfwd_add {self._netdev} {rule}", HMP_TIMEOUT)).strip()
            after = forwarded_rows(await machine.ahmp("info usernet", HMP_TIMEOUT))
            new = [row for row in after - before if row[0] == spec.protocol and row[2] == spec.port]
            if said or len(new) != 1:
                raise PortForwardError(
                    f"QEMU did not forward guest port {spec} of {machine.name}: "
                    f"{said or 'no new forward in info usernet'}"
                )
            forward = Forward(spec, new[0][1])
            self._forwards[spec] = forward
            return forward

    async def remove(self, port: PortSpec | int | str) -> None:
        """End the forward of the guest's ``port``.

        :raise PortForwardError: it is not forwarded, or QEMU refused.
        """
        spec = parse_port(port)
        async with self._lock:
            machine = self._require_machine(spec)
            forward = self.get(spec)
            rule = f"{spec.protocol}:{HOST_ADDRESS}:{forward.host_port}"
            said = await machine.ahmp(f"hostfwd_remove {self._netdev} {rule}", HMP_TIMEOUT)
            if "removed" not in said:
                raise PortForwardError(f"QEMU did not remove the forward of {spec}: {said.strip()}")
            del self._forwards[spec]

    def get(self, port: PortSpec | int | str) -> Forward:
        """The forward of the guest's ``port``.

        :raise PortForwardError: it is not forwarded (naming those that are).
        """
        spec = parse_port(port)
        forward = self._forwards.get(spec)
        if forward is None:
            known = ", ".join(str(f.spec) for f in self.forwards) or "none"
            raise PortForwardError(
                f"guest port {spec} is not forwarded (forwarded: {known}); ask for it with "
                f"adare_vm(ports=[{spec.port if spec.protocol == 'tcp' else repr(str(spec))}]) "
                "or guest.forward()"
            )
        return forward

    def _require_machine(self, spec: PortSpec) -> HumanMonitor:
        if self._machine is None:
            raise PortForwardError(f"cannot forward guest port {spec}: {self._why_not}")
        return self._machine

    def describe(self) -> str:
        """One line for the start-up progress, e.g. ``80/tcp→127.0.0.1:43211``."""
        return ", ".join(f"{f.spec}→{f.host}:{f.host_port}" for f in self.forwards)
