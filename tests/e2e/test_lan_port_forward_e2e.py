"""A LAN member's forwarded port: the member serves, the host fetches through the forward
of the member's own user-mode NIC (``internet=True``), and the segment's pcap
(``--adare-pcap``) holds only the scenario's frames: the host's fetch never crosses it."""

from __future__ import annotations

from pathlib import Path

import dpkt  # type: ignore[import-untyped]
import pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900

MEMBER_SERVES = """
import urllib.request

FETCH = (
    "python3 -c 'import sys, urllib.request as u; "
    "sys.stdout.write(u.urlopen(\\"http://server:8080/lan\\", timeout=5).read().decode())'"
)


def test_the_host_fetches_from_a_member(adare_lan, adare_artifacts):
    lan = adare_lan(subnet="10.77.0.0/24", internet=True)
    server = lan.start("server", ports=[8080])
    client = lan.start("client")
    (adare_artifacts / "macs.txt").write_text(lan.mac("server") + " " + lan.mac(client))
    server.guest.succeed("mkdir -p /srv/www && cd /srv/www && echo lan > lan && echo host > host")
    server.guest.shell("cd /srv/www && exec python3 -m http.server 8080", background=True).check()
    server.guest.wait_for_port(8080, timeout=300, from_host=True)
    with urllib.request.urlopen(server.guest.url(8080, "/host"), timeout=60) as answer:
        assert answer.read() == b"host\\n"
    assert client.guest.wait_until_succeeds(FETCH, timeout=120).stdout == "lan\\n"
"""


def test_a_member_serves_the_host_and_the_segment_holds_only_the_scenario(
    pytester: pytest.Pytester, test_image: str, tmp_path: Path
) -> None:
    pytester.makepyfile(test_lan_forward=MEMBER_SERVES)
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--adare-vm={test_image}", f"--adare-artifacts={artifacts}",
        "--adare-pcap", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    folder = artifacts / "test_lan_forward.py_test_the_host_fetches_from_a_member"
    macs = {bytes.fromhex(m.replace(":", "")) for m in (folder / "macs.txt").read_text().split()}
    with (folder / "lan-lan0.pcap").open("rb") as file:
        frames = [dpkt.ethernet.Ethernet(buf) for _, buf in dpkt.pcap.Reader(file)]
    assert frames and {eth.src for eth in frames} <= macs
    payloads = [
        eth.data.data.data
        for eth in frames
        if isinstance(eth.data, dpkt.ip.IP) and isinstance(eth.data.data, dpkt.tcp.TCP)
    ]
    assert any(p.startswith(b"GET /lan HTTP") for p in payloads)  # the client's, on the LAN
    assert not any(b"GET /host" in p for p in payloads)  # the host's went through the forward
