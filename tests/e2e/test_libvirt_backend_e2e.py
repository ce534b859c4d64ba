"""The plugin on a libvirt hypervisor: inner pytest runs with
``--adare-hypervisor=qemu:///system`` boot the built-in console image as a transient
domain (TCG) on this machine's libvirt daemon, which the fixture starts when none runs
(CI machines are fresh: ``scripts/setup`` installs it, nothing starts it).

- The newcomer suite, one VM: shell, snapshot diff, pull, per-test isolation by internal
  snapshots, a screenshot through ``virDomainScreenshot``, a memory dump, the pcap
  refusal, and a failing test's report sections (with the film of its screen);
  afterwards no domain and no per-VM volume is left. Before it, a run SIGKILLed with its
  VM up leaves its domain and volumes behind, and this run's reaper removes them.
- The remote path: shell, pull and isolation through ``qemu+ssh://root@127.0.0.1:<port>``
  to an sshd on loopback with a key made for the test (the same daemon behind it,
  reached as a remote host is: every byte through the libvirt connection).
- ``-n 2`` over two URIs (local and ``qemu+ssh://``, the same daemon) with a limit of one
  VM per hypervisor: one worker, one VM on each.
- The pool on the real daemon: a base volume uploaded once, reused, a torn upload taken
  over.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

URI = "qemu:///system"
INNER_TIMEOUT = 900
DAEMON_WAIT = 30.0
"""Bound on libvirtd answering after the fixture started it."""

SCENARIOS = """
import hashlib
import pytest
from PIL import Image
from pytest_adare.errors import AdareError

def test_1_shell_diff_and_pull(guest, tmp_path):
    assert guest.shell("uname -s").stdout == "Linux\\n"
    before = guest.fs_snapshot("/root")
    guest.shell("head -c 300000 /dev/urandom > /root/blob && sha256sum /root/blob").check()
    diff = guest.fs_snapshot("/root").diff(before)
    assert "/root/blob" in diff.created
    digest = guest.shell("sha256sum /root/blob").stdout.split()[0]
    guest.pull("/root/blob", tmp_path / "blob")
    assert hashlib.sha256((tmp_path / "blob").read_bytes()).hexdigest() == digest

def test_2_isolation_restored_the_ready_state(guest):
    assert guest.shell("ls /root/blob 2>/dev/null").stdout == ""

def test_3_screenshot_through_libvirt(guest):
    guest.shell("clear; echo LIBVIRT-SCREEN > /dev/tty1 || true")
    image = guest.screenshot()
    assert isinstance(image, Image.Image) and image.width >= 320 and image.height >= 200
    assert len(set(image.convert("L").getdata())) > 1

def test_4_fails_with_report_sections(guest):
    assert guest.shell("echo hi").stdout == "bye\\n"

def test_5_memory_dump_through_libvirt_and_no_pcap(adare_vm, tmp_path):
    dump = adare_vm.dump_memory(tmp_path / "memory.elf")
    with dump.open("rb") as elf:
        assert elf.read(4) == b"\\x7fELF"
    assert dump.stat().st_size >= 200 << 20
    assert not list(tmp_path.glob("*.part"))
    with pytest.raises(AdareError, match="not supported on the libvirt backend"):
        with adare_vm.network_capture(tmp_path / "net.pcap"):
            pass
"""


KILLED = """
import pathlib, time

def test_waits_to_be_killed(guest):
    pathlib.Path({marker!r}).write_text("up")
    time.sleep(600)
"""


def _virsh(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def libvirt_system() -> str:
    """``qemu:///system`` answering: the running daemon, or one started here (as root)."""
    pytest.importorskip("libvirt", reason="libvirt-python is not installed (the dev extra)")
    if shutil.which("virsh") is None:
        pytest.skip("virsh is not installed (scripts/setup installs libvirt-clients)")
    _let_the_qemu_user_open_kvm()
    if _virsh("version").returncode == 0:
        return URI
    if os.geteuid() != 0 or shutil.which("libvirtd") is None:
        pytest.skip(f"no libvirt daemon answers at {URI} and this user cannot start one")
    # No systemd on a CI machine: start the daemons themselves (they detach).
    for daemon in ("virtlogd", "libvirtd"):
        subprocess.run([daemon, "--daemon"], check=True, timeout=30)
    deadline = time.monotonic() + DAEMON_WAIT
    while (answer := _virsh("version")).returncode != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"libvirtd started but {URI} did not answer in {DAEMON_WAIT:.0f} s: "
                        f"{answer.stderr.strip()}")  # fmt: skip
        time.sleep(0.5)
    return URI


def _let_the_qemu_user_open_kvm() -> None:
    """/dev/kvm as udev leaves it on Debian (root:kvm 0660; libvirt-qemu is in kvm). A
    container's root-only /dev/kvm makes libvirtd re-probe QEMU's capabilities on every
    domain start (about 70 s here); domains still run under TCG (type qemu)."""
    kvm = Path("/dev/kvm")
    if os.geteuid() != 0 or not kvm.exists() or kvm.stat().st_mode & 0o060 == 0o060:
        return
    with contextlib.suppress(LookupError):  # no kvm group: nothing udev would do either
        shutil.chown(kvm, group="kvm")
        kvm.chmod(0o660)


def _ours(listing: str) -> set[str]:
    return {word for word in listing.split() if word.startswith("adare-")}


def killed_run(pytester: pytest.Pytester, source: str, test_image: str, uri: str) -> int:
    """Run the test file ``source`` (its ``{marker}`` is a file it writes once its VMs are
    up) on ``uri`` until the marker exists, SIGKILL that pytest; its pid."""
    marker = pytester.path / "vms-are-up"
    pytester.makepyfile(test_killed=source.format(marker=str(marker)))
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_killed.py",
         f"--adare-vm={test_image}", f"--adare-hypervisor={uri}"],
        cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + INNER_TIMEOUT
        while not marker.exists():
            assert inner.poll() is None, "the run to be killed ended by itself"
            assert time.monotonic() < deadline, "the run to be killed never got its VMs up"
            time.sleep(0.5)
    finally:
        inner.kill()
        inner.wait(30)
    (pytester.path / "test_killed.py").unlink()
    return inner.pid


def _killed_run_leaves_a_domain(pytester: pytest.Pytester, test_image: str, uri: str) -> str:
    """Run pytest until its VM is up, SIGKILL it; the domain it leaves behind."""
    pid = killed_run(pytester, KILLED, test_image, uri)
    left = [name for name in _ours(_virsh("list", "--name").stdout) if f"-{pid}-" in name]
    assert len(left) == 1, f"the killed run (pid {pid}) should have left its domain"
    return left[0]


def test_the_newcomer_suite_passes_on_a_libvirt_domain_and_reaps_a_killed_runs_leftovers(
    pytester: pytest.Pytester, test_image: str, libvirt_system: str
) -> None:
    domains_before = _ours(_virsh("list", "--all", "--name").stdout)
    leftover = _killed_run_leaves_a_domain(pytester, test_image, libvirt_system)
    assert leftover in _virsh("vol-list", "adare").stdout, "and its overlay volume"
    pytester.makepyfile(test_scenarios=SCENARIOS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", f"--adare-vm={test_image}", "--adare-keep=on-failure",
        f"--adare-hypervisor={libvirt_system}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["adare: image *, hypervisor qemu:///system (libvirt), *"])
    result.stdout.fnmatch_lines(["*removed 3 leftover(s) of killed runs*"])
    result.stdout.fnmatch_lines(["not kept: * ran on qemu:///system; *not supported on the*"])
    assert leftover not in _virsh("vol-list", "adare").stdout
    result.stdout.fnmatch_lines(["*connect: serial*"])
    result.stdout.fnmatch_lines(["*qemu: libvirt qemu:///system; accel: tcg*"])
    result.stdout.fnmatch_lines(
        ["*test_2_isolation_restored_the_ready_state PASSED (restore ready state * s)*"]
    )
    result.stdout.fnmatch_lines(["*- adare console tail -*", "*adare-init: agent started*"])
    result.stdout.fnmatch_lines(["*adare recording*", "*recording.webp: * distinct frames*"])
    assert _ours(_virsh("list", "--all", "--name").stdout) == domains_before
    volumes = _virsh("vol-list", "adare").stdout
    assert not [line for line in volumes.splitlines() if "-overlay.qcow2" in line
                or "-initrd.img " in line]  # fmt: skip
    assert "adare-disk-" in volumes, "the base disk stays in the pool for later runs"


@pytest.fixture
def ssh_uri(libvirt_system: str, tmp_path: Path) -> Iterator[str]:
    """``qemu+ssh://`` to this machine's daemon: an sshd on loopback with a fresh key."""
    if shutil.which("sshd", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("sshd is not installed (scripts/setup installs openssh-server)")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / key],
                       check=True, timeout=30)  # fmt: skip
    (tmp_path / "authorized_keys").write_bytes((tmp_path / "client_key.pub").read_bytes())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {tmp_path / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {tmp_path / 'sshd.pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    sshd = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-f", tmp_path / "sshd_config", "-E", tmp_path / "sshd.log"]
    )
    uri = f"qemu+ssh://root@127.0.0.1:{port}/system?keyfile={tmp_path / 'client_key'}&no_verify=1"
    try:
        deadline = time.monotonic() + DAEMON_WAIT
        while (answer := subprocess.run(["virsh", "-c", uri, "version"], capture_output=True,
                                        text=True, timeout=30)).returncode != 0:  # fmt: skip
            if time.monotonic() > deadline:
                pytest.fail(f"{uri} did not answer in {DAEMON_WAIT:.0f} s: {answer.stderr}")
            time.sleep(0.5)
        yield uri
    finally:
        sshd.kill()
        sshd.wait(30)


def test_shell_pull_and_isolation_through_a_remote_uri(
    pytester: pytest.Pytester, test_image: str, ssh_uri: str
) -> None:
    pytester.makepyfile(test_scenarios=SCENARIOS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", f"--adare-vm={test_image}", "-k", "test_1 or test_2",
        f"--adare-hypervisor={ssh_uri}", timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*qemu: libvirt qemu+ssh://root@127.0.0.1:*; accel: tcg*"])
    result.stdout.fnmatch_lines(
        ["*test_2_isolation_restored_the_ready_state PASSED (restore ready state * s)*"]
    )


@pytest.fixture
def adare_pool(libvirt_system: str) -> Iterator[Any]:
    """The real ``adare`` pool on the local daemon (volumes made by a test are removed)."""
    from pytest_adare.libvirt_backend.connection import open_connection
    from pytest_adare.libvirt_backend.storage import ensure_pool

    conn = open_connection(libvirt_system)
    before = set(ensure_pool(conn, libvirt_system).listVolumes())
    pool = ensure_pool(conn, libvirt_system)
    yield pool
    pool.refresh(0)
    for name in set(pool.listVolumes()) - before:
        pool.storageVolLookupByName(name).delete(0)
    conn.close()


def test_a_base_volume_is_uploaded_once_and_a_torn_upload_is_taken_over(
    adare_pool: Any, tmp_path: Path
) -> None:
    from pytest_adare.libvirt_backend.domain_xml import (
        base_volume_name,
        build_raw_volume_xml,
        uploader_marker_name,
    )
    from pytest_adare.libvirt_backend.reaper import host_tag
    from pytest_adare.libvirt_backend.storage import (
        ensure_base_volume,
        file_digest,
        upload_is_torn,
    )

    data = tmp_path / "initrd.gz"
    data.write_bytes(os.urandom(3 << 20 | 123))
    volume, uploaded = ensure_base_volume(adare_pool, "initrd", data)
    assert uploaded and Path(volume.path()).read_bytes() == data.read_bytes()
    again, uploaded = ensure_base_volume(adare_pool, "initrd", data)
    assert not uploaded and again.path() == volume.path()

    # A second file whose uploader was killed mid-way: its volume and marker are there,
    # its process is gone; the next runner takes over at once.
    torn = tmp_path / "vmlinuz"
    torn.write_bytes(os.urandom(1 << 20))
    name = base_volume_name("kernel", file_digest(torn))
    gone = subprocess.Popen(["true"])
    gone.wait()
    adare_pool.createXML(build_raw_volume_xml(uploader_marker_name(name, host_tag(),
                                                                   gone.pid), 0), 0)  # fmt: skip
    adare_pool.createXML(build_raw_volume_xml(name, torn.stat().st_size), 0)
    adare_pool.refresh(0)
    assert upload_is_torn(adare_pool, name)
    for live in (uploader_marker_name(name, host_tag(), os.getpid()),
                 uploader_marker_name(name, host_tag("another-runner"), gone.pid)):  # fmt: skip
        adare_pool.createXML(build_raw_volume_xml(live, 0), 0)
        adare_pool.refresh(0)
        assert not upload_is_torn(adare_pool, name), live
        adare_pool.storageVolLookupByName(live).delete(0)
    volume, uploaded = ensure_base_volume(adare_pool, "kernel", torn)
    assert uploaded
    assert Path(volume.path()).read_bytes() == torn.read_bytes()
    adare_pool.refresh(0)
    assert not [v for v in adare_pool.listVolumes() if v.startswith(f"{name}.uploader-")]


def test_base_volumes_are_made_while_another_runner_makes_volumes_in_the_pool(
    adare_pool: Any, libvirt_system: str, tmp_path: Path
) -> None:
    """Two workers on one daemon: while one makes a volume (its overlay, its claim), the
    pool refuses a refresh ("has asynchronous jobs running"); the other still finds or
    makes its volumes (a fresh-cache run of two workers failed on that refusal)."""
    import libvirt

    from pytest_adare.libvirt_backend.connection import open_connection
    from pytest_adare.libvirt_backend.domain_xml import build_raw_volume_xml
    from pytest_adare.libvirt_backend.storage import ensure_base_volume, ensure_pool

    other = open_connection(libvirt_system)
    other_pool = ensure_pool(other, libvirt_system)
    stop = threading.Event()

    def make_volumes() -> None:  # the other runner, making one volume after another
        name = f"adare-test-busy-{os.getpid()}"
        while not stop.is_set():
            other_pool.createXML(build_raw_volume_xml(name, 64 << 20), 0).delete(0)

    busy = threading.Thread(target=make_volumes)
    busy.start()
    try:
        refused = 0
        for _ in range(200):
            try:
                adare_pool.refresh(0)
            except libvirt.libvirtError as exc:
                assert "asynchronous jobs running" in str(exc)
                refused += 1
        assert refused, "the other runner's volumes never kept the pool busy"
        for index in range(5):
            assert ensure_pool(adare_pool.connect(), libvirt_system).name() == "adare"
            data = tmp_path / f"initrd{index}.gz"
            data.write_bytes(os.urandom(256 << 10))
            volume, uploaded = ensure_base_volume(adare_pool, "initrd", data)
            assert uploaded and Path(volume.path()).read_bytes() == data.read_bytes()
    finally:
        stop.set()
        busy.join()
        other.close()


SPREAD = """
import os, pathlib

def test_where_my_vm_runs(adare_vm, guest):
    assert guest.shell("echo up").stdout == "up\\n"
    worker = os.environ["PYTEST_XDIST_WORKER"]
    pathlib.Path(f"{worker}.uri").write_text(adare_vm.options.hypervisor)
"""


def test_two_workers_spread_over_two_hypervisor_uris_one_vm_each(
    pytester: pytest.Pytester, test_image: str, ssh_uri: str
) -> None:
    pytester.makepyfile(test_spread=SPREAD)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist=each", f"--adare-vm={test_image}",
        f"--adare-hypervisor={URI},{ssh_uri}", "--adare-hypervisor-limit=1",
        timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [f"adare: image *, hypervisors (libvirt, at most 1 each): {URI} (1 VM), qemu+ssh:* (1 VM)*"]
    )
    assert {(pytester.path / f"gw{n}.uri").read_text() for n in (0, 1)} == {URI, ssh_uri}
