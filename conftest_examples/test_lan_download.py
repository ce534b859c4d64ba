"""Two machines on a private LAN: a client downloads a file from a server by name; the
test checks the client's file-system diff and the HTTP request in the segment's pcap,
both in one evidence bundle of the client (docs/networks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dpkt

from pytest_adare.forensics.evidence_bundle import verify_bundle

PORT = 8000
DOWNLOAD = (
    "mkdir -p /home/user/Downloads && python3 -c 'import urllib.request as u; "
    f'u.urlretrieve("http://server:{PORT}/report.pdf", "/home/user/Downloads/report.pdf")\''
)


def http_requests(pcap: Path) -> list[bytes]:
    """The first line of every HTTP request in ``pcap``."""
    lines = []
    with pcap.open("rb") as file:
        for _, frame in dpkt.pcap.Reader(file):
            ip = dpkt.ethernet.Ethernet(frame).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                payload = bytes(ip.data.data)
                if payload.startswith((b"GET ", b"POST ")):
                    lines.append(payload.split(b"\r\n", 1)[0])
    return lines


def test_client_downloads_a_report_from_the_server(adare_lan: Any, adare_artifacts: Path) -> None:
    lan = adare_lan(subnet="10.77.0.0/24")
    server = lan.start("server")
    client = lan.start("client")
    server.guest.succeed(
        "mkdir -p /srv && head -c 20000 /dev/urandom > /srv/report.pdf && cd /srv && "
        f"(python3 -m http.server {PORT} >/dev/null 2>&1 &)"
    )
    server.guest.wait_for_port(PORT, timeout=60)

    before = client.guest.fs_snapshot("/home", hash=True)
    segment = adare_artifacts / "segment.pcap"
    with lan.capture(segment):
        client.guest.succeed(DOWNLOAD, timeout=60)
    diff = client.guest.fs_snapshot("/home", hash=True).diff(before)
    assert "/home/user/Downloads/report.pdf" in diff.created

    bundle = adare_artifacts / "client-evidence"
    manifest = client.collect_evidence(bundle, memory=False, disk=False, fs_diff=diff)
    assert verify_bundle(bundle) == []
    names = {f["name"] for f in manifest["files"]}
    assert "network.pcap" in names
    # The bundle's pcap is the client's LAN NIC since it joined; the segment's pcap the
    # whole wire during the download: both hold the one request.
    assert http_requests(bundle / "network.pcap") == [b"GET /report.pdf HTTP/1.1"]
    assert http_requests(segment) == [b"GET /report.pdf HTTP/1.1"]
    recorded = json.loads((bundle / "manifest.json").read_text())
    assert recorded["files"] == manifest["files"]
