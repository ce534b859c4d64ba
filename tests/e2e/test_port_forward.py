"""Forwarded guest ports on the built-in console image: a service in the guest answers the
host's urllib through its forward after a warm start and after a restore of the ready state;
a UDP forward carries a datagram both ways; forwards made at run time come and go."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.machine_tools.port_forward import PortForwardError
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

HTTP_PORT = 8080
UDP_PORT = 5353
UDP_ECHO = (
    "python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
    f's.bind(("0.0.0.0", {UDP_PORT}))\nwhile True:\n d, a = s.recvfrom(2048); '
    's.sendto(b"echo:" + d, a)\''
)


def serve_http(vm: VM, text: str) -> None:
    vm.guest.shell(f"mkdir -p /tmp/www && printf %s {text} > /tmp/www/index.txt").check()
    vm.guest.shell(
        f"cd /tmp/www && exec python3 -m http.server {HTTP_PORT}", background=True
    ).check()
    vm.guest.wait_for_port(HTTP_PORT, timeout=300, from_host=True)  # python under TCG: slow


def fetch(vm: VM, path: str) -> str:
    with urllib.request.urlopen(vm.guest.url(HTTP_PORT, path), timeout=60) as answer:
        return str(answer.read().decode())


def udp_round_trip(address: tuple[str, int], payload: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(60)
        sock.sendto(payload, address)
        return sock.recvfrom(2048)[0]


def test_a_guest_service_answers_the_host_after_a_warm_start_and_a_restore(
    tmp_path: Path,
) -> None:
    manifest = image_under_test()
    image = manifest.path or manifest.disk
    with launch(image, workdir=tmp_path / "first", progress=None):
        pass  # boots cold and saves the ready state when none is saved yet
    with launch(
        image, workdir=tmp_path / "second", progress=None, ports=[HTTP_PORT, f"{UDP_PORT}/udp"]
    ) as vm:
        assert "warm" in [p.name for p in vm.phases]
        host, port = vm.guest.port(HTTP_PORT)
        assert host == "127.0.0.1" and port != vm.machine.agent_port
        vm.save_ready()
        serve_http(vm, "before-restore")
        assert fetch(vm, "/index.txt") == "before-restore"
        vm.guest.shell(UDP_ECHO, background=True).check()
        vm.guest.wait_until_succeeds(f"grep -qi ':{UDP_PORT:04X} ' /proc/net/udp")
        assert udp_round_trip(vm.guest.port(f"{UDP_PORT}/udp"), b"ping") == b"echo:ping"
        # The restored guest has no server any more; the forward is still there for a new one.
        vm.restore_ready()
        assert vm.guest.port(HTTP_PORT) == (host, port)
        serve_http(vm, "after-restore")
        assert fetch(vm, "index.txt") == "after-restore"


def test_a_forward_made_at_run_time_answers_until_it_is_removed(console_vm: VM) -> None:
    guest = console_vm.guest
    guest.shell("mkdir -p /tmp/rt && echo runtime > /tmp/rt/f").check()
    guest.shell("cd /tmp/rt && exec python3 -m http.server 9001", background=True).check()
    with pytest.raises(PortForwardError, match="9001/tcp is not forwarded"):
        guest.port(9001)
    address = guest.forward(9001)
    with pytest.raises(PortForwardError, match="already forwarded"):
        guest.forward("9001/tcp")
    guest.wait_for_port(9001, timeout=300, from_host=True)
    with urllib.request.urlopen(guest.url(9001, "/f"), timeout=60) as answer:
        assert answer.read() == b"runtime\n"
    guest.unforward(9001)
    with pytest.raises(PortForwardError, match="not forwarded"):
        guest.port(9001)
    with pytest.raises(OSError), socket.create_connection(address, timeout=30) as sock:
        sock.sendall(b"GET /f HTTP/1.0\r\n\r\n")
        assert sock.recv(100)  # nothing listens on the host port any more
