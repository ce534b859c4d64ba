"""LANs on a libvirt hypervisor: inner pytest runs with ``--adare-hypervisor=qemu:///system``
put the built-in console image's domains (TCG, cold boots) on an isolated libvirt network.

- A run SIGKILLed with a LAN member up leaves its domain and its network behind; the
  next run's reaper removes both.
- That run: two members, a web server in one, the other fetches it by name; ``block``
  cuts the server's link (libvirt link state) and ``unblock`` restores it; the segment
  capture is refused naming the feature. Afterwards none of the runs' networks is left.
- ``--adare-pcap`` with a libvirt LAN fails naming the segment capture, and leaves no
  network behind.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_libvirt_backend_e2e import (
    INNER_TIMEOUT,
    _ours,
    _virsh,
    killed_run,
    libvirt_system,  # noqa: F401  (the fixture that starts the daemon when none runs)
)

pytestmark = pytest.mark.e2e

FETCH_BY_NAME = """
import os
import subprocess
import time

import pytest

from pytest_adare.machine.base import UnsupportedFeature

PORT = 8080
FETCH = (
    "python3 -c 'import sys, urllib.request as u; "
    "sys.stdout.write(u.urlopen(\\"http://server:{port}/\\", timeout=2).read().decode())'"
)


def test_fetch_by_name_on_an_isolated_libvirt_network(adare_lan, tmp_path):
    lan = adare_lan(subnet="10.78.0.0/24")
    ours = [n for n in subprocess.run(["virsh", "-c", "qemu:///system", "net-list", "--name"],
            capture_output=True, text=True, check=True).stdout.split()
            if f"-{os.getpid()}-" in n]
    assert len(ours) == 1 and ours[0].endswith("-lan0"), ours
    xml = subprocess.run(["virsh", "-c", "qemu:///system", "net-dumpxml", ours[0]],
                         capture_output=True, text=True, check=True).stdout
    assert "<forward" not in xml and "<ip" not in xml
    server = lan.start("server")
    client = lan.start("client")
    assert server.guest.succeed("hostname").strip() == "server"
    assert client.guest.succeed("grep server /etc/hosts").split()[0] == "10.78.0.1"
    server.guest.succeed("mkdir -p /srv/www && echo hello-libvirt > /srv/www/index.html")
    server.guest.succeed(
        f"cd /srv/www && (python3 -m http.server {PORT} >/tmp/http.log 2>&1 &)"
    )
    server.guest.wait_for_port(PORT, timeout=60)
    fetch = FETCH.format(port=PORT)
    assert client.guest.wait_until_succeeds(fetch, timeout=60).stdout == "hello-libvirt\\n"

    nic = lan.interface("server")
    lan.block("server")
    started = time.monotonic()
    server.guest.wait_until_succeeds(f"[ $(cat /sys/class/net/{nic}/carrier) = 0 ]", timeout=5)
    print(f"link down seen after {time.monotonic() - started:.2f} s")
    client.guest.wait_until_fails(fetch, timeout=10)
    lan.unblock("server")
    client.guest.wait_until_succeeds(fetch, timeout=30)

    with pytest.raises(UnsupportedFeature, match="a capture of a LAN segment"):
        with lan.capture(tmp_path / "segment.pcap"):
            pass
    # No internet: the segment is the members' only network.
    client.guest.fail(
        "python3 -c 'import socket; socket.create_connection((\\"10.0.2.2\\", 80), 2)'"
    )
"""

KILLED = """
import pathlib, time

def test_waits_to_be_killed(adare_lan):
    adare_lan(subnet="10.79.0.0/24").start("alone")
    pathlib.Path({marker!r}).write_text("up")
    time.sleep(600)
"""

ONE_PCAP_LAN = """
def test_a_lan_with_adare_pcap(adare_lan):
    adare_lan()
"""


def _networks() -> set[str]:
    return _ours(_virsh("net-list", "--all", "--name").stdout)


def _killed_run_leaves_a_domain_and_a_network(
    pytester: pytest.Pytester, test_image: str, uri: str
) -> tuple[str, str]:
    owned = f"-{killed_run(pytester, KILLED, test_image, uri)}-"
    domains = [d for d in _ours(_virsh("list", "--name").stdout) if owned in d]
    networks = [n for n in _networks() if owned in n]
    assert len(domains) == 1 and len(networks) == 1, (domains, networks)
    return domains[0], networks[0]


def test_two_members_fetch_by_name_on_libvirt_and_a_killed_runs_network_is_reaped(
    pytester: pytest.Pytester, test_image: str, libvirt_system: str  # noqa: F811
) -> None:
    networks_before = _networks()
    domain, network = _killed_run_leaves_a_domain_and_a_network(
        pytester, test_image, libvirt_system
    )
    pytester.makepyfile(test_lan_libvirt=FETCH_BY_NAME)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "-s", f"--adare-vm={test_image}",
        f"--adare-hypervisor={libvirt_system}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    # The killed run's domain, its overlay and initrd volumes, and its network.
    result.stdout.fnmatch_lines(["*removed 4 leftover(s) of killed runs*"])
    result.stdout.fnmatch_lines(["link down seen after * s"])
    assert domain not in _virsh("list", "--all", "--name").stdout
    assert _networks() == networks_before, "every run's network is gone"
    assert network not in _networks()


def test_adare_pcap_with_a_libvirt_lan_fails_naming_the_feature(
    pytester: pytest.Pytester, test_image: str, libvirt_system: str  # noqa: F811
) -> None:
    networks_before = _networks()
    pytester.makepyfile(test_pcap_lan=ONE_PCAP_LAN)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--adare-vm={test_image}", "--adare-pcap",
        f"--adare-hypervisor={libvirt_system}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*a capture of a LAN segment (pcap): not supported on the libvirt backend*"]
    )
    assert _networks() == networks_before
