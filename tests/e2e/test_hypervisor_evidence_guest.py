"""Evidence from the hypervisor on a real guest: pcap, memory dump, disk export, the
evidence bundle and the agent's footprint (one VM for the module; each test works on
its own names, so they do not see each other)."""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypervisor_tools import (
    elf_load_segments,
    file_contains,
    loopback_http_server,
    tcp_payloads,
)

from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.evidence_bundle import CASE_FILE, MANIFEST_FILE, verify_bundle
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
OUTSIDE_SCENARIO = ["/proc", "/sys", "/dev", "/run", "/tmp"]
VENV_BIN = Path(sys.executable).parent


def fetch_in_guest(vm: VM, url: str) -> str:
    code = f"import urllib.request as u, sys; sys.stdout.write(u.urlopen({url!r}).read().decode())"
    return vm.guest.shell(f"python3 -c {shlex.quote(code)}").check().stdout


def case_validate(path: Path) -> None:
    done = subprocess.run(
        [str(VENV_BIN / "case_validate"), str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"case_validate {path.name}:\n{done.stdout}\n{done.stderr}"


def test_network_capture_holds_the_guests_http_request(console_vm: VM, tmp_path: Path) -> None:
    marker = f"/evidence-{secrets.token_hex(8)}"
    pcap = tmp_path / "net.pcap"
    with loopback_http_server() as server, console_vm.network_capture(pcap) as capture:
        assert fetch_in_guest(console_vm, server.url_from_guest(marker)) == "adare says hello\n"
    assert not capture.active and not capture.truncated
    requests = [p for p in tcp_payloads(pcap) if p.data.startswith(f"GET {marker} ".encode())]
    assert len(requests) == 1
    assert (requests[0].src, requests[0].dst, requests[0].dport) == (
        "10.0.2.15", "10.0.2.2", server.port
    )  # fmt: skip
    answers = [p for p in tcp_payloads(pcap) if p.sport == server.port]
    assert any(b"adare says hello" in p.data for p in answers)
    # The filter is gone: traffic after the block is not appended.
    size = pcap.stat().st_size
    console_vm.guest.shell("echo still here").check()
    assert pcap.stat().st_size == size


def test_memory_dump_holds_a_guest_process_marker_and_the_kernel_banner(
    console_vm: VM, tmp_path: Path
) -> None:
    marker = f"adare-marker-{secrets.token_hex(12)}"
    # The process builds the marker from hex, so the raw text exists only in its memory.
    holder = (
        "import sys, time; held = bytes.fromhex(sys.argv[1]).decode() * 3; time.sleep(3600)"
    )
    console_vm.guest.shell(
        f"setsid python3 -c '{holder}' {marker.encode().hex()} </dev/null >/dev/null 2>&1 &"
    ).check()
    console_vm.guest.shell("sleep 2").check()
    release = console_vm.guest.shell("uname -r").check().stdout.strip()
    dump = console_vm.dump_memory(tmp_path / "memory.elf")
    ram = console_vm.machine.launched_config.memory_mib * MiB  # type: ignore[union-attr]
    segments = elf_load_segments(dump)
    assert sum(size for _, size, _ in segments) >= ram - MiB
    covered = sorted((start, start + size) for start, size, _ in segments)
    reach = MiB  # below 1 MiB lie the legacy VGA window and ROMs, not RAM
    for start, end in covered:
        if start <= reach:
            reach = max(reach, end)
    assert reach >= min(ram, 0x80000000), f"RAM not covered past {reach:#x}: {covered}"
    assert file_contains(dump, marker.encode())
    assert console_vm.guest.shell("echo resumed").check().stdout == "resumed\n"
    banners = subprocess.run(
        [str(VENV_BIN / "vol"), "-q", "-f", str(dump), "banners.Banners"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert banners.returncode == 0, banners.stderr
    assert f"Linux version {release} " in banners.stdout, banners.stdout[-2000:]


@pytest.mark.skipif(shutil.which("debugfs") is None, reason="debugfs (e2fsprogs) not installed")
def test_exported_raw_disk_holds_a_file_written_in_the_guest(
    console_vm: VM, tmp_path: Path
) -> None:
    name = f"/root/disk-evidence-{secrets.token_hex(6)}.txt"
    content = f"written at {secrets.token_hex(8)}\n"
    console_vm.guest.shell(f"printf '%s' '{content}' > {name}").check()
    raw = console_vm.export_disk(tmp_path / "disk.raw", "raw")
    done = subprocess.run(
        ["debugfs", "-R", f"cat {name}", str(raw)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout == content, done.stderr
    assert console_vm.guest.shell(f"cat {name}").check().stdout == content  # thawed, running


def test_evidence_bundle_manifest_matches_its_files_and_is_valid_case(
    console_vm: VM, tmp_path: Path
) -> None:
    guest = console_vm.guest
    workdir = f"/root/bundle-{secrets.token_hex(4)}"
    guest.shell(f"mkdir -p {workdir}").check()
    with guest.watch_fs(workdir, hash=True) as watch:
        guest.shell(f"echo data > {workdir}/made.txt").check()
    assert watch.diff is not None
    bundle = tmp_path / "bundle"
    with loopback_http_server() as server, console_vm.network_capture(tmp_path / "net.pcap"):
        fetch_in_guest(console_vm, server.url_from_guest("/bundle"))
        manifest = console_vm.collect_evidence(bundle, fs_diff=watch.diff, test_id="t::bundle")
    assert verify_bundle(bundle) == []
    kinds = sorted(item["kind"] for item in manifest["files"])
    assert kinds == ["disk", "fs-diff", "fs-diff-case", "memory", "pcap"]
    on_disk = json.loads((bundle / MANIFEST_FILE).read_text())
    assert on_disk == manifest
    assert manifest["test_id"] == "t::bundle"
    assert manifest["image"]["name"] == console_vm.manifest.name
    assert manifest["image"]["disk_sha256"] == console_vm.manifest.disk_sha256
    assert manifest["qemu"]["argv"] == console_vm.machine.argv
    assert manifest["qemu"]["version"].split()[0] in subprocess.run(
        ["qemu-system-x86_64", "--version"], capture_output=True, text=True
    ).stdout
    clocks = manifest["clocks"]
    assert abs(clocks["guest"] - clocks["host_at_guest_read"]) < 120  # guest on host time
    assert manifest["quiesced"].startswith("qemu-ga fsfreeze")
    (bundle / "memory.elf").write_bytes(b"tampered")
    assert verify_bundle(bundle) == [f"memory.elf: size 8 != {on_disk['files'][0]['size']}"]
    case_validate(bundle / CASE_FILE)
    case_validate(bundle / "fs-diff.jsonld")


def test_agent_calls_alone_leave_no_trace_outside_the_agent_root(
    console_vm: VM, tmp_path: Path
) -> None:
    guest = console_vm.guest
    before = guest.fs_snapshot("/", exclude=OUTSIDE_SCENARIO)
    guest.shell("echo hello; ls / > /dev/null").check()
    guest.fs_snapshot("/etc")
    guest.pull("/etc/hostname", tmp_path / "hostname")
    after = guest.fs_snapshot("/", exclude=OUTSIDE_SCENARIO)
    assert after.diff(before) == FsDiff.empty()
    root = guest.aio.agent_root
    assert root is not None and root not in after
    with_agent = guest.fs_snapshot(root, include_agent=True)
    assert f"{root}/agent.log" in with_agent
