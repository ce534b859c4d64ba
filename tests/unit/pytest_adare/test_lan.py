"""LAN segments without guests: the plan, the hub on real Unix sockets, its pcap, and
bad input refused before any VM starts."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dpkt  # type: ignore[import-untyped]
import pytest

from pytest_adare.lan.addressing import LanError, LanPlan, hosts_file, private_subnet
from pytest_adare.lan.forwarder import Forwarder
from pytest_adare.lan.guest_config import join_command
from pytest_adare.lan.pcap import PcapWriter
from pytest_adare.lan.port import lan_port
from pytest_adare.lan.segment import Lan
from pytest_adare.machine.base import UnsupportedFeature


@pytest.fixture
def private_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="adare-lan-test-"))  # short: socket path limit
    yield path
    shutil.rmtree(path, ignore_errors=True)


def frame(src: int, dst: int, payload: bytes = b"hello") -> bytes:
    return bytes([2, 0, 0, 0, 0, dst]) + bytes([2, 0, 0, 0, 0, src]) + b"\x08\x00" + payload


def test_addresses_macs_and_hosts_follow_the_order_of_joining() -> None:
    plan = LanPlan.create("10.77.0.0/24", lan_index=3)
    server, client = plan.add("server"), plan.add("client")
    assert (server.address, client.address, server.prefix) == ("10.77.0.1", "10.77.0.2", 24)
    assert server.mac.startswith("02:") and server.mac.endswith(":03:01")
    assert LanPlan.create("10.77.0.0/24", 3).add("server").mac != server.mac  # random part
    assert hosts_file([server, client]) == (
        "127.0.0.1 localhost\n10.77.0.1 server\n10.77.0.2 client\n"
    )


@pytest.mark.parametrize(
    ("subnet", "message"),
    [
        ("8.8.8.0/24", "not private"),
        ("10.77.0.0/31", "too small"),
        ("10.77.0.1/24", "not an IPv4 network"),
        ("10.0.2.0/24", "QEMU's user network"),
        ("fd00::/64", "not an IPv4 network"),
    ],
)
def test_a_bad_subnet_is_refused(subnet: str, message: str) -> None:
    with pytest.raises(LanError, match=message):
        private_subnet(subnet)


def test_names_must_be_hostnames_unique_and_fit_the_subnet() -> None:
    plan = LanPlan.create("192.168.5.0/30", 0)
    plan.add("a")
    with pytest.raises(LanError, match="already has a member named 'a'"):
        plan.add("a")
    with pytest.raises(LanError, match="hostname"):
        plan.add("Not_A_Host")
    plan.add("b")
    with pytest.raises(LanError, match="too small for another member"):
        plan.add("c")


def test_the_join_command_finds_the_nic_by_pci_slot_and_checks_for_ip() -> None:
    port = lan_port(1, "02:00:00:00:01:01", socket="/s", peer="/p")
    member = LanPlan.create("10.77.0.0/24", 0).add("server")
    command = join_command(port, member, "127.0.0.1 localhost\n10.77.0.1 server\n")
    assert "command -v ip" in command.splitlines()[0]
    assert "/sys/bus/pci/devices/0000:00:11.0/virtio*/net/*" in command
    assert "ip addr add 10.77.0.1/24 dev" in command
    assert "echo server > /proc/sys/kernel/hostname" in command
    assert "10.77.0.1 server" in command and "> /etc/hosts" in command


def test_the_hub_forwards_to_the_others_and_taps_every_frame_once(private_dir: Path) -> None:
    forwarder = Forwarder(private_dir).start()
    ends = []
    try:
        for name in ("a", "b", "c"):
            qemu_path, hub_path = forwarder.add_port(name)
            forwarder.admit(name)
            end = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            end.bind(qemu_path)
            end.settimeout(2)
            ends.append((end, hub_path))
        pcap = private_dir / "seg.pcap"
        writer = PcapWriter(pcap)
        forwarder.add_tap(writer)
        ends[0][0].sendto(frame(1, 2), ends[0][1])
        assert ends[1][0].recv(2048) == frame(1, 2)
        assert ends[2][0].recv(2048) == frame(1, 2)
        ends[0][0].settimeout(0.2)
        with pytest.raises(TimeoutError):
            ends[0][0].recv(2048)  # a hub does not echo
        forwarder.remove_tap(writer)
        writer.close()
        with pcap.open("rb") as file:
            assert [bytes(buf) for _, buf in dpkt.pcap.Reader(file)] == [frame(1, 2)]
    finally:
        forwarder.close()
        for end, _ in ends:
            end.close()
    assert stat.S_IMODE(os.stat(private_dir).st_mode) == 0o700


def test_frames_from_anyone_but_the_members_qemu_are_dropped(private_dir: Path) -> None:
    forwarder = Forwarder(private_dir).start()
    _, hub_a = forwarder.add_port("a")
    qemu_b, _ = forwarder.add_port("b")
    b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.bind(qemu_b)
    b.settimeout(0.3)
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stranger.bind(str(private_dir / "x.sock"))
    try:
        stranger.sendto(frame(9, 2), hub_a)
        with pytest.raises(TimeoutError):
            b.recv(2048)
    finally:
        forwarder.close()
        b.close()
        stranger.close()


def test_a_member_is_off_the_segment_until_admitted(private_dir: Path) -> None:
    # What a guest sends before the LAN has configured it (its boot's IPv6, a warm
    # start's announcements of the saved MAC) never reaches the others or a capture.
    forwarder = Forwarder(private_dir).start()
    ends = {}
    for name in ("a", "b"):
        qemu_path, hub_path = forwarder.add_port(name)
        end = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        end.bind(qemu_path)
        end.settimeout(0.3)
        ends[name] = (end, hub_path)
    writer = PcapWriter(private_dir / "seg.pcap")
    forwarder.add_tap(writer)
    try:
        forwarder.admit("a")
        ends["b"][0].sendto(frame(2, 0xFF, b"boot"), ends["b"][1])  # b is not admitted
        ends["a"][0].sendto(frame(1, 0xFF, b"to-all"), ends["a"][1])
        with pytest.raises(TimeoutError):
            ends["a"][0].recv(2048)  # b's boot frame was dropped
        with pytest.raises(TimeoutError):
            ends["b"][0].recv(2048)  # and b gets nothing before it is admitted
        forwarder.admit("b")
        ends["b"][0].sendto(frame(2, 1, b"joined"), ends["b"][1])
        ends["b"][0].settimeout(2)
        ends["a"][0].settimeout(2)
        assert ends["a"][0].recv(2048) == frame(2, 1, b"joined")
        ends["a"][0].sendto(frame(1, 2, b"reply"), ends["a"][1])
        assert ends["b"][0].recv(2048) == frame(1, 2, b"reply")
    finally:
        forwarder.close()
        for end, _ in ends.values():
            end.close()
    forwarder.remove_tap(writer)
    writer.close()
    with (private_dir / "seg.pcap").open("rb") as file:
        assert [bytes(buf) for _, buf in dpkt.pcap.Reader(file)] == [
            frame(1, 0xFF, b"to-all"), frame(2, 1, b"joined"), frame(1, 2, b"reply"),
        ]  # fmt: skip


def test_a_member_that_does_not_read_costs_a_bounded_queue(private_dir: Path) -> None:
    forwarder = Forwarder(private_dir, queue_frames=4).start()
    qemu_a, hub_a = forwarder.add_port("a")
    qemu_b, _ = forwarder.add_port("b")
    forwarder.admit("a")
    forwarder.admit("b")
    a, b = (socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2))
    a.bind(qemu_a)
    b.bind(qemu_b)  # never read
    try:
        for _ in range(400):
            a.sendto(frame(1, 2, b"x" * 1400), hub_a)
        deadline = time.monotonic() + 5
        while forwarder.dropped()["b"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert forwarder.dropped()["b"] > 0
    finally:
        forwarder.close()
        a.close()
        b.close()


def test_the_pcap_stops_at_its_bound(private_dir: Path) -> None:
    writer = PcapWriter(private_dir / "small.pcap", max_bytes=24 + 16 + 100)
    writer.write(b"a" * 100)
    writer.write(b"b" * 100)
    writer.close()
    assert (writer.frames, writer.truncated) == (1, True)
    with pytest.raises(FileExistsError):
        PcapWriter(private_dir / "small.pcap")


class Starts:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.ports: list[Any] = []

    def __call__(self, name: str, ports: Any, options: Any) -> Any:
        self.calls.append((name, options))
        self.ports.append(ports)
        raise RuntimeError("no VM in this test")


def new_lan(directory: Path, starter: Starts, siblings: list[Lan] | None = None) -> Lan:
    return Lan("lan0", "10.77.0.0/24", internet=False, directory=directory, index=0,
               starter=starter, closer=lambda vms: None, siblings=siblings)  # fmt: skip


def test_bad_input_is_refused_before_any_vm_starts(private_dir: Path) -> None:
    starter = Starts()
    lan = new_lan(private_dir, starter)
    try:
        with pytest.raises(LanError, match="hostname"):
            lan.start("Bad Name")
        with pytest.raises(LanError, match="transport"):
            lan.start("server", transport="websocket")
        with pytest.raises(LanError, match="given twice"):
            lan.start("server", networks=[lan])
        with pytest.raises(RuntimeError, match="no VM"):
            lan.start("server", image="debian")
        assert starter.calls == [
            ("server", {"image": "debian", "transport": "serial", "network": False})
        ]
        assert lan.members == {}  # the failed start left no member behind
    finally:
        lan.close()
    with pytest.raises(LanError, match="closed"):
        lan.start("late")
    assert len(starter.calls) == 1
    with pytest.raises(LanError, match="no member"):
        lan.address("server")


def test_a_member_is_named_by_its_hostname_or_its_vm_and_anything_else_is_refused(
    private_dir: Path,
) -> None:
    lan = new_lan(private_dir, Starts())
    try:
        with pytest.raises(LanError, match=r"lan0 has no member object '' \(members: none\)"):
            lan.block(object())  # type: ignore[arg-type]
        with pytest.raises(LanError, match="no member 'server'"):
            lan.unblock("server")
        with pytest.raises(LanError, match=r"no member 'xxxx.{76}' "):
            lan.mac("x" * 10_000)
    finally:
        lan.close()


class Network:
    """A hypervisor's network as the LAN sees it: a name, and closed once."""

    name = "adare-1a2b3c4d-42-0badcafe-lan0"
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_libvirt_lan_names_its_network_has_no_segment_capture_and_closes_it(
    private_dir: Path,
) -> None:
    network = Network()
    starter = Starts()
    lan = Lan("lan0", "10.77.0.0/24", internet=False, directory=private_dir, index=0,
              starter=starter, closer=lambda vms: None, backend="libvirt",
              network=network)  # fmt: skip
    with pytest.raises(UnsupportedFeature, match="capture of a LAN segment"):
        lan.start_capture(private_dir / "x.pcap")
    with pytest.raises(RuntimeError, match="no VM"):
        lan.start("server")
    assert starter.ports[0][0].network == network.name
    assert not starter.ports[0][0].socket
    lan.close()
    lan.close()
    assert network.closed == 1


