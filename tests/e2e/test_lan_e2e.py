"""LANs end to end: inner pytest runs whose tests put real QEMU guests on a segment.

Boots are few: the first member of the first run boots cold and saves the LAN members'
ready state; every other member (this run's, the parallel run's) starts warm.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import dpkt  # type: ignore[import-untyped]
import pytest

from tests.inner_run import run_inner_pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900

TWO_MEMBERS = """
import dpkt  # type: ignore[import-untyped]
import pytest

from pytest_adare.lan.addressing import LanError

PORT = 8080
AGENT_PORT = 18765
# python3: every image the agent runs in has it (not every one has a wget).
FETCH = (
    "python3 -c 'import sys, urllib.request as u; "
    "sys.stdout.write(u.urlopen(\\"{url}\\", timeout=2).read().decode())'"
)


def segment_frames(path):
    with open(path, "rb") as file:
        return [dpkt.ethernet.Ethernet(buf) for _, buf in dpkt.pcap.Reader(file)]


def tcp_of(frames):
    for eth in frames:
        if isinstance(eth.data, dpkt.ip.IP) and isinstance(eth.data.data, dpkt.tcp.TCP):
            yield eth.data.data


def test_server_and_client(adare_lan, adare_artifacts):
    lan = adare_lan(subnet="10.77.0.0/24")
    server = lan.start("server")
    client = lan.start("client")
    (adare_artifacts / "macs.txt").write_text(lan.mac("server") + " " + lan.mac(client))
    assert sorted(lan.members) == ["client", "server"]
    assert (lan.address("server"), lan.address(client)) == ("10.77.0.1", "10.77.0.2")
    assert server.guest.succeed("hostname").strip() == "server"
    server.guest.succeed("mkdir -p /srv/www && echo hello-lan > /srv/www/index.html")
    server.guest.succeed(
        f"cd /srv/www && (python3 -m http.server {PORT} >/tmp/http.log 2>&1 &)"
    )
    server.guest.wait_for_port(PORT, timeout=60)
    fetch = FETCH.format(url=f"http://server:{PORT}/")

    pcap = adare_artifacts / "segment.pcap"
    with lan.capture(pcap) as capture:
        assert client.guest.wait_until_succeeds(fetch, timeout=60).stdout == "hello-lan\\n"
    assert capture.frames > 0
    frames = segment_frames(pcap)
    assert any(t.dport == PORT and t.data.startswith(b"GET / HTTP") for t in tcp_of(frames))
    assert not [t for t in tcp_of(frames) if AGENT_PORT in (t.sport, t.dport)]
    assert {eth.src for eth in frames} <= {
        bytes.fromhex(lan.mac(name).replace(":", "")) for name in ("server", "client")
    }

    nic = lan.interface(server)  # a member is its name or the VM lan.start returned
    lan.block(server)
    server.guest.wait_until_succeeds(f"[ $(cat /sys/class/net/{nic}/carrier) = 0 ]", timeout=30)
    client.guest.wait_until_fails(fetch, timeout=60)
    lan.unblock(server)
    client.guest.wait_until_succeeds(fetch, timeout=30)

    # No internet: the client has the segment only, no route to the host's network.
    client.guest.fail(FETCH.format(url="http://10.0.2.2/"))
    assert "10.0.2" not in client.guest.succeed("ip -4 addr")

    bundle = client.collect_evidence(adare_artifacts / "bundle", memory=False, disk=False)
    assert "network.pcap" in {f["name"] for f in bundle["files"]}  # its LAN NIC's traffic
    member_frames = segment_frames(adare_artifacts / "bundle" / "network.pcap")
    assert any(t.data.startswith(b"GET / HTTP") for t in tcp_of(member_frames))
    with pytest.raises(ValueError, match="has no NIC 'net0'"):  # vm.network_capture(nic=)
        with client.network_capture(adare_artifacts / "none.pcap", nic="net0"):
            pass

    server.machine.kill()
    assert lan.dead_members() == ["server"]
    with pytest.raises(LanError, match="server"):
        lan.check_alive()
    assert client.guest.succeed("echo still-here") == "still-here\\n"
"""

PARALLEL = """
import pytest

SEND = (
    "python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    "[s.sendto(b\\"x\\" * 64, (\\"alpha\\", 9)) for _ in range(5)]'"
)


@pytest.mark.parametrize("n", [0, 1])
def test_lan(adare_lan, adare_artifacts, n):
    lan = adare_lan(subnet="10.77.0.0/24")
    lan.start("alpha")
    beta = lan.start("beta")
    with lan.capture(adare_artifacts / "segment.pcap"):
        beta.guest.succeed(SEND)
        beta.guest.wait_until_succeeds("ip neigh | grep -q 10.77.0.1", timeout=10)
    (adare_artifacts / "macs.txt").write_text(lan.mac("alpha") + " " + lan.mac("beta"))
"""


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return run_inner_pytest(pytester, "-p", "no:cacheprovider", *args, timeout=INNER_TIMEOUT)


def sources(pcap: Path) -> set[str]:
    with pcap.open("rb") as file:
        return {dpkt.ethernet.Ethernet(buf).src.hex(":") for _, buf in dpkt.pcap.Reader(file)}


def foreign_frames(pcap: Path, macs: set[str], subnet: str) -> list[str]:
    """The frames of ``pcap`` the scenario did not send: another MAC than a member's,
    other than IPv4 or ARP (RARP announcements, IPv6), or IPv4/ARP outside ``subnet``."""
    network = ipaddress.IPv4Network(subnet)
    foreign = []
    with pcap.open("rb") as file:
        for _, buf in dpkt.pcap.Reader(file):
            eth = dpkt.ethernet.Ethernet(buf)
            if isinstance(eth.data, dpkt.ip.IP):
                addresses = [eth.data.src, eth.data.dst]
            elif isinstance(eth.data, dpkt.arp.ARP):
                addresses = [eth.data.spa, eth.data.tpa]
            else:
                addresses = []
            inside = addresses and all(
                ipaddress.IPv4Address(a) in network for a in addresses
            )  # fmt: skip
            if eth.src.hex(":") not in macs or not inside:
                foreign.append(f"{eth.src.hex(':')} type {eth.type:#06x} {bytes(eth.data)[:40]!r}")
    return foreign


def test_two_members_fetch_by_name_block_and_die(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path
) -> None:
    pytester.makepyfile(test_lan_scenario=TWO_MEMBERS)
    artifacts = tmp_path / "artifacts"
    result = run_inner(
        pytester, "-v", "-rs", f"--adare-vm={test_image}", f"--adare-artifacts={artifacts}",
        "--adare-pcap",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    folder = artifacts / "test_lan_scenario.py_test_server_and_client"
    # --adare-pcap: the segment for the whole test, and only the scenario's frames in it:
    # neither the members' boot nor a warm start's announcements of the saved state.
    macs = set((folder / "macs.txt").read_text().split())
    assert sources(folder / "lan-lan0.pcap")
    assert foreign_frames(folder / "lan-lan0.pcap", macs, "10.77.0.0/24") == []


def test_parallel_lans_never_see_each_others_frames(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path
) -> None:
    pytester.makepyfile(test_lan_parallel=PARALLEL)
    artifacts = tmp_path / "artifacts"
    result = run_inner(
        pytester, "-n", "2", f"--adare-vm={test_image}", f"--adare-artifacts={artifacts}"
    )
    result.assert_outcomes(passed=2)
    seen = []
    for n in (0, 1):
        folder = artifacts / f"test_lan_parallel.py_test_lan_{n}"
        macs = set((folder / "macs.txt").read_text().split())
        found = sources(folder / "segment.pcap")
        assert found and found <= macs, (found, macs)
        seen.append(found)
    assert not seen[0] & seen[1]
