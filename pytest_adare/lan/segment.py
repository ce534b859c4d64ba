""":class:`Lan`: one private layer-2 segment and the VMs on it (what ``adare_lan`` makes).

A LAN plans its members (:mod:`.addressing`), runs its hub (:mod:`.forwarder`, on
QEMU) or is given the hypervisor's network (an isolated libvirt network), and hands
every member's NIC to the VM as a :class:`~.port.LanPort` in its options; once a
member's agent is connected it sets the member's address, MAC and hostname through the
agent, and rewrites ``/etc/hosts`` on every member so each resolves the others by name.
Members reach their agent over the serial link, never over the segment, and a member's
port on the hub opens only once it is configured (what its guest sent before, while it
booted or loaded a saved state, is dropped), so the segment carries only what the
scenario sends.

How VMs are started and closed is the caller's (the plugin goes through its pool; a
script can start ``VM`` s itself): ``starter(hostname, ports, options)`` returns a
started VM, ``closer(vms)`` closes the ones this LAN started.

Example::

    lan = adare_lan(subnet="10.77.0.0/24")
    server = lan.start("server")
    client = lan.start("client")
    client.guest.succeed("ping -c 1 server")
    with lan.capture(adare_artifacts / "lan.pcap"):
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_adare.lan.addressing import LanError, LanPlan, Member, hosts_file
from pytest_adare.lan.forwarder import Forwarder
from pytest_adare.lan.guest_config import NO_IP_TOOL, NO_NIC, hosts_command, join_command
from pytest_adare.lan.pcap import PcapWriter
from pytest_adare.lan.port import MAX_LAN_PORTS, HypervisorNetwork, LanPort, lan_port
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine.base import Capability, require
from pytest_adare.machine.results import CAPTURE_MAX_BYTES, CAPTURE_SNAPLEN

if TYPE_CHECKING:
    from pytest_adare.vm import VM

Starter = Callable[[str, tuple[LanPort, ...], dict[str, Any]], "VM"]
Closer = Callable[[Sequence["VM"]], None]
CONFIG_TIMEOUT = 30.0
RESERVED_OPTIONS = frozenset({"transport", "network", "backend", "hypervisor"})
"""Options a LAN decides for its members (the serial link; ``internet``; the backend)."""


@dataclass
class _Joined:
    """One member's place on this LAN: its plan, port, VM, and running NIC capture."""

    member: Member
    port: LanPort
    vm: VM | None = None
    interface: str = ""
    capture: AbstractAsyncContextManager[Any] | None = None


class Lan:
    """One segment; see the module docstring. ``name`` names it in files and errors."""

    def __init__(
        self, name: str, subnet: object, *, internet: bool, directory: Path, index: int,
        starter: Starter, closer: Closer, backend: str = "qemu",
        siblings: list[Lan] | None = None, network: HypervisorNetwork | None = None,
    ) -> None:  # fmt: skip
        """``siblings``: the other LANs a member may also be on (the test's; this LAN
        joins the list), for the names in its ``/etc/hosts``. ``network``: the segment
        as the backend's own network (libvirt; closed with the LAN, the host runs no hub);
        None: the host forwards the segment between the members' sockets.

        :raise LanError: a bad subnet."""
        self.name = name
        self.internet = internet
        self.backend = backend
        self.directory = directory
        self._plan = LanPlan.create(subnet, index)
        self._starter = starter
        self._closer = closer
        self._joined: dict[str, _Joined] = {}
        self._started_here: list[VM] = []
        self._closed = False
        self._network = network
        # No network of the backend's own: the host forwards the segment between sockets.
        self._forwarder = Forwarder(directory).start() if network is None else None
        self._siblings = siblings if siblings is not None else []
        self._siblings.append(self)

    @property
    def subnet(self) -> str:
        return str(self._plan.network)

    @property
    def members(self) -> Mapping[str, VM]:
        """Hostname → VM, for every member that has started."""
        return {name: j.vm for name, j in self._joined.items() if j.vm is not None}

    def member_name(self, member: str | VM) -> str:
        """The hostname of ``member``, given as its name or as the VM :meth:`start`
        returned (every method taking a member takes either).

        :raise LanError: no such member on this LAN."""
        if isinstance(member, str):
            if member in self._joined:
                return member
        else:
            for name, joined in self._joined.items():
                if joined.vm is not None and joined.vm is member:
                    return name
        shown = (
            repr(member[:80]) if isinstance(member, str)
            else f"{type(member).__name__} {str(getattr(member, 'name', ''))[:80]!r}"
        )  # fmt: skip
        raise LanError(f"LAN {self.name} has no member {shown} (members: "
                       f"{', '.join(self._joined) or 'none'})")  # fmt: skip

    def address(self, member: str | VM) -> str:
        """The member's address on this segment (``10.77.0.1``).

        :raise LanError: no such member."""
        return self._joined[self.member_name(member)].member.address

    def mac(self, member: str | VM) -> str:
        """The member's MAC address on this segment."""
        return self._joined[self.member_name(member)].member.mac

    def interface(self, member: str | VM) -> str:
        """The name of the member's NIC on this segment inside the guest (``eth0``)."""
        return self._joined[self.member_name(member)].interface

    # -- joining ----------------------------------------------------------------------

    def start(self, name: str, *, networks: Sequence[Lan] = (), **options: Any) -> VM:
        """Start a VM named ``name`` (its hostname) on this LAN and on every LAN of
        ``networks``; ``options`` are the ``adare_vm`` marker's (``image=``,
        ``memory=``, ...). Returns it once it is addressed and every member resolves it.

        :raise LanError: before any VM starts: a bad or taken name, a full subnet, a
            closed LAN, an option the LAN decides; after: the guest cannot be configured.
        """
        lans = [self, *networks]
        if len({id(lan) for lan in lans}) != len(lans):
            raise LanError(f"{name!r}: a LAN is given twice")
        if len(lans) > MAX_LAN_PORTS:
            raise LanError(f"{name!r}: a VM can be on at most {MAX_LAN_PORTS} LANs")
        reserved = sorted(RESERVED_OPTIONS & set(options))
        if reserved:
            raise LanError(
                f"{name!r}: {', '.join(reserved)} cannot be given to a LAN member: it talks to "
                "its agent over the serial link, and has the user-mode NIC when its LAN has "
                "internet=True"
            )
        for lan in lans:
            lan._check_open()
            lan._plan.check_new(name)
        if any(lan.backend != self.backend for lan in lans):
            raise LanError(f"{name!r}: its LANs are on different backends")
        ports = tuple(lan._reserve(name, index) for index, lan in enumerate(lans))
        given = dict(options, transport="serial", network=any(lan.internet for lan in lans))
        try:
            vm = self._starter(name, ports, given)
        except BaseException:
            for lan in lans:
                lan._release(name)
            raise
        self._started_here.append(vm)
        for lan in lans:
            lan._joined[name].vm = vm
        for lan in lans:
            lan._configure(name)  # its address on each, and its /etc/hosts
        self._publish_hosts(lans, vm)
        return vm

    def _check_open(self) -> None:
        if self._closed:
            raise LanError(f"LAN {self.name} is closed: it ended with the test that made it")

    def _reserve(self, name: str, index: int) -> LanPort:
        member = self._plan.add(name)
        if self._network is not None:
            port = lan_port(index, member.mac, network=self._network.name)
        else:
            assert self._forwarder is not None
            socket, peer = self._forwarder.add_port(name)
            port = lan_port(index, member.mac, socket=socket, peer=peer)
        self._joined[name] = _Joined(member, port)
        return port

    def _release(self, name: str) -> None:
        self._joined.pop(name, None)
        self._plan.remove(name)
        if self._forwarder is not None:
            self._forwarder.remove_port(name)

    def _configure(self, name: str) -> None:
        joined = self._joined[name]
        assert joined.vm is not None
        command = join_command(joined.port, joined.member, self._hosts_of(joined.vm))
        result = joined.vm.guest.shell(command, timeout=CONFIG_TIMEOUT)
        if result.returncode == NO_IP_TOOL:
            raise LanError(
                f"LAN member {name!r}: the guest has no 'ip' command (iproute2 or busybox) "
                "to set its address on the segment; install iproute2 in the image"
            )
        if result.returncode == NO_NIC:
            raise LanError(f"LAN member {name!r}: no NIC in PCI slot {joined.port.slot:#x} "
                           "(the guest lacks a virtio-net driver?)")  # fmt: skip
        if not result.ok:
            raise LanError(f"LAN member {name!r}: setting its address failed "
                           f"(exit {result.returncode}): {result.stderr.strip()}")  # fmt: skip
        joined.interface = result.stdout.strip().splitlines()[-1]
        if self._forwarder is not None:
            self._forwarder.admit(name)  # its own MAC and address now, and no IPv6
        machine = joined.vm.machine
        if Capability.NETWORK_CAPTURE in machine.capabilities:
            # Its own NIC's traffic, for the member's evidence bundle (collect_evidence).
            joined.capture = machine.network_capture(
                joined.vm.workdir / f"lan-{self.name}.pcap", nic=joined.port.netdev
            )
            shared_loop().run(joined.capture.__aenter__())

    def _hosts_of(self, vm: VM) -> str:
        """The ``/etc/hosts`` of ``vm``: the members of every LAN it is on."""
        names: list[Member] = []
        for lan in self._siblings:
            if vm in lan.members.values():
                names += [j.member for j in lan._joined.values() if j.vm is not None]
        return hosts_file(names)

    def _publish_hosts(self, lans: Sequence[Lan], new: VM) -> None:
        """Rewrite ``/etc/hosts`` on every other member of ``lans`` now that ``new`` is on
        them, all at once (one round trip each, concurrently)."""
        others: list[VM] = []
        for lan in lans:
            others += [vm for vm in lan.members.values() if vm is not new and vm not in others]
        if not others:
            return

        async def publish() -> None:
            await asyncio.gather(*(
                vm.guest.aio.succeed(hosts_command(self._hosts_of(vm)), timeout=CONFIG_TIMEOUT)
                for vm in others
            ))  # fmt: skip

        shared_loop().run(publish(), CONFIG_TIMEOUT + 5)

    # -- faults -------------------------------------------------------------------------

    def block(self, member: str | VM) -> None:
        """Cut the member's link to this segment (the guest sees no carrier).

        :raise UnsupportedFeature: the backend cannot set a link.
        :raise LanError: no such member, or it died."""
        self._set_link(self.member_name(member), False)

    def unblock(self, member: str | VM) -> None:
        """Restore the member's link after :meth:`block`."""
        self._set_link(self.member_name(member), True)

    def _set_link(self, name: str, up: bool) -> None:
        joined = self._joined[name]
        assert joined.vm is not None
        require(joined.vm.machine, Capability.LINK)
        self._check_member(name)
        shared_loop().run(joined.vm.machine.aset_link(up, nic=joined.port.netdev), 30.0)

    def dead_members(self) -> list[str]:
        """The members whose machine is no longer running."""
        return [n for n, j in self._joined.items() if j.vm is not None and not
                j.vm.machine.is_running()]  # fmt: skip

    def check_alive(self) -> None:
        """:raise LanError: naming every member that died (the others keep running)."""
        dead = self.dead_members()
        if dead:
            raise LanError(f"LAN {self.name}: member(s) {', '.join(dead)} died "
                           f"({len(self.members) - len(dead)} still running)")  # fmt: skip

    def _check_member(self, name: str) -> None:
        if name in self.dead_members():
            raise LanError(f"LAN {self.name}: member {name!r} died")

    # -- evidence -----------------------------------------------------------------------

    @contextlib.contextmanager
    def capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES,
    ) -> Iterator[PcapWriter]:  # fmt: skip
        """``with lan.capture("lan.pcap") as pcap:`` every frame on the segment, once, as
        classic pcap (the agent's traffic is not on the segment; nor is the user-mode
        NIC's). ``pcap.frames`` counts them, ``pcap.truncated`` says ``max_bytes`` was hit.

        :raise UnsupportedFeature: the backend has no capture point (libvirt).
        :raise FileExistsError: ``path`` exists.
        """
        writer = self.start_capture(path, snaplen=snaplen, max_bytes=max_bytes)
        try:
            yield writer
        finally:
            self.stop_capture(writer)

    def start_capture(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES,
    ) -> PcapWriter:  # fmt: skip
        """:meth:`capture` without the block: stop it with :meth:`stop_capture`."""
        # Deferred: the machine layer is loaded only once a LAN captures.
        from pytest_adare.machine.base import unsupported

        if self._forwarder is None:
            raise unsupported(self.backend, "a capture of a LAN segment (pcap)")
        self._check_open()
        writer = PcapWriter(path, snaplen=snaplen, max_bytes=max_bytes)
        self._forwarder.add_tap(writer)
        return writer

    def stop_capture(self, writer: PcapWriter) -> None:
        if self._forwarder is not None:
            self._forwarder.remove_tap(writer)
        writer.close()

    # -- the end ------------------------------------------------------------------------

    def stop_member_captures(self) -> None:
        """Stop the members' own NIC captures (before their VMs are closed)."""
        for joined in self._joined.values():
            if joined.capture is not None:
                with contextlib.suppress(Exception):
                    shared_loop().run(joined.capture.__aexit__(None, None, None), 30.0)
                joined.capture = None

    def close(self) -> None:
        """Close the VMs this LAN started, then the segment (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop_member_captures()
            self._closer(list(self._started_here))
        finally:
            if self._forwarder is not None:
                self._forwarder.close()
            if self._network is not None:
                self._network.close()
            shutil.rmtree(self.directory, ignore_errors=True)
