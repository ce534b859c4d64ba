"""The Machine on the built-in console image: boot, QMP, console, QGA, snapshots, death.

The image: see ``image_under_test``. Timings are printed (``-s``) for the issue, never asserted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.errors import VMDied, VMLaunchError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.qga import QGAClient
from pytest_adare.qemu.machine import Machine

pytestmark = pytest.mark.e2e

QGA_BOOT_TIMEOUT = 180.0


def _report(what: str, seconds: float) -> None:
    print(f"\n[timing] {what}: {seconds:.2f} s")


@pytest.fixture(scope="module")
def image() -> ImageManifest:
    return image_under_test()


@pytest.fixture(scope="module")
def base_hash(image: ImageManifest) -> str:
    return file_sha256(image.disk)


@pytest.fixture(scope="module")
def booted(
    image: ImageManifest, base_hash: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Machine, QGAClient]]:
    """One booted VM for the module (boots are expensive under TCG), QGA answering."""
    started = time.monotonic()
    machine = Machine(image, tmp_path_factory.mktemp("vm"), MachineSpec(name="e2e"))
    machine.start()
    _report(f"QEMU start -> QMP connected ({machine.accel_reason})", time.monotonic() - started)
    qga = QGAClient(machine.qga_path)
    qga.sync(timeout=QGA_BOOT_TIMEOUT)
    _report("QEMU start -> QGA answers guest-sync-delimited", time.monotonic() - started)
    yield machine, qga
    qga.close()
    machine.shutdown()


def test_console_output_reaches_the_log_file_and_the_ring(
    booted: tuple[Machine, QGAClient],
) -> None:
    machine, qga = booted
    mark = machine.console_mark()
    qga.exec(["sh", "-c", "echo console-probe-$((6 * 7)) > /dev/ttyS0"])
    line = machine.wait_for_console(r"console-probe-\d+", timeout=30, since=mark).group(0)
    assert line == "console-probe-42"
    assert "console-probe-42" in machine.console_log_path.read_text(errors="replace")
    assert any("console-probe-42" in entry for entry in machine.console_tail(5))


def test_qmp_reports_a_running_guest(booted: tuple[Machine, QGAClient]) -> None:
    machine, _ = booted
    assert machine.qmp("query-status")["status"] == "running"
    assert machine.is_running()
    assert machine.accel_reason is not None and machine.accel_reason.startswith("accel: ")


def test_forwarded_port_is_on_loopback_and_reaches_guest_port_18765(
    booted: tuple[Machine, QGAClient],
) -> None:
    machine, qga = booted
    assert machine.agent_port is not None and 0 < machine.agent_port < 65536
    usernet = machine.hmp("info usernet")
    assert re.search(rf"127\.0\.0\.1\s+{machine.agent_port}\s+\S+\s+18765", usernet)
    # Something must answer HTTP there: the baked agent, or a listener started for the test.
    if qga.exec(["sh", "-c", "ss -ltn 2>/dev/null | grep -q ':18765 '"]).exitcode != 0:
        qga.spawn(["busybox", "nc", "-l", "-p", "18765", "-e", "echo", "HTTP/1.1 200 OK"])
    deadline = time.monotonic() + 60
    reply = b""
    while not reply.startswith(b"HTTP/1.1") and time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", machine.agent_port), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: adare\r\n\r\n")
            conn.settimeout(10)
            try:
                reply = conn.recv(64)
            except (TimeoutError, ConnectionResetError):
                reply = b""
        if not reply:
            time.sleep(0.5)
    assert reply.startswith(b"HTTP/1.1"), "nothing in the guest answered on port 18765"


def test_qga_exec_and_file_round_trip(booted: tuple[Machine, QGAClient]) -> None:
    _, qga = booted
    started = time.monotonic()
    result = qga.exec(["sh", "-c", "echo hi; echo oops >&2; exit 3"])
    _report("QGA guest-exec + guest-exec-status polling", time.monotonic() - started)
    assert (result.exitcode, result.stdout, result.stderr) == (3, b"hi\n", b"oops\n")
    data = os.urandom(3 * 1024 * 1024 + 7)
    started = time.monotonic()
    qga.file_write("/tmp/roundtrip.bin", data)
    back = qga.file_read("/tmp/roundtrip.bin")
    _report("QGA 3 MiB write + read", time.monotonic() - started)
    assert back == data
    digest = qga.exec(["sha256sum", "/tmp/roundtrip.bin"]).stdout.split()[0].decode()
    assert digest == hashlib.sha256(data).hexdigest()


def test_loadvm_restores_the_saved_state(booted: tuple[Machine, QGAClient]) -> None:
    machine, qga = booted
    qga.file_write("/root/state.txt", b"saved\n")
    qga.exec(["sync"])
    started = time.monotonic()
    machine.savevm("ready")
    _report("savevm (HMP)", time.monotonic() - started)
    qga.file_write("/root/state.txt", b"changed after the save\n")
    qga.exec(["sync"])
    started = time.monotonic()
    machine.loadvm("ready")
    _report("loadvm (HMP)", time.monotonic() - started)
    qga.close()  # the guest's qemu-ga is back in the saved state: resync
    qga.sync(timeout=30)
    _report("loadvm + QGA resync", time.monotonic() - started)
    assert qga.file_read("/root/state.txt") == b"saved\n"
    assert machine.is_running()


def test_screendump_is_an_image_of_the_vga_screen(booted: tuple[Machine, QGAClient]) -> None:
    machine, _ = booted
    started = time.monotonic()
    screen = machine.screendump()
    _report("screendump", time.monotonic() - started)
    assert screen.width >= 640 and screen.height >= 400
    assert screen.convert("L").getextrema() != (0, 0), "the screen is all black"


def test_typed_keys_reach_the_guest_console(booted: tuple[Machine, QGAClient]) -> None:
    machine, qga = booted
    before = qga.exec(["cat", "/proc/interrupts"]).stdout
    keyboard_irqs = _i8042_count(before)
    machine.type_text("Hi!")
    machine.send_keys("ctrl", "c")
    after = _i8042_count(qga.exec(["cat", "/proc/interrupts"]).stdout)
    assert after > keyboard_irqs, "no keyboard interrupts reached the guest"


def _i8042_count(interrupts: bytes) -> int:
    for line in interrupts.decode().splitlines():
        if "i8042" in line and line.strip().startswith("1:"):
            return sum(int(field) for field in line.split()[1:] if field.isdigit())
    raise AssertionError(f"no i8042 keyboard line in /proc/interrupts:\n{interrupts.decode()}")


def test_reset_reboots_the_guest_without_ending_qemu(booted: tuple[Machine, QGAClient]) -> None:
    machine, qga = booted
    qga.exec(["sh", "-c", "echo before-reset > /dev/shm/marker"])
    started = time.monotonic()
    machine.reset()
    qga.close()
    qga.sync(timeout=QGA_BOOT_TIMEOUT)
    _report("reset -> QGA answers again", time.monotonic() - started)
    assert machine.is_running()
    assert qga.exec(["test", "-e", "/dev/shm/marker"]).exitcode == 1, "RAM survived the reset"


def test_guest_poweroff_ends_a_wait_at_once_with_vmdied(
    booted: tuple[Machine, QGAClient], image: ImageManifest, base_hash: str
) -> None:
    machine, qga = booted
    qga.spawn(["sh", "-c", "sleep 1; poweroff -f"])
    started = time.monotonic()
    with pytest.raises(VMDied, match=r"guest shut down|QEMU exited"):
        machine.wait_for_console("this never appears", timeout=120)
    _report("poweroff -> VMDied", time.monotonic() - started)
    assert not machine.is_running()
    machine.shutdown()
    assert file_sha256(image.disk) == base_hash, "the base image was written to"


def test_guest_kernel_panic_ends_a_wait_with_vmdied(image: ImageManifest, tmp_path: Path) -> None:
    with Machine(image, tmp_path / "vm", MachineSpec(name="panic")) as machine:
        with QGAClient(machine.qga_path) as qga:
            qga.sync(timeout=QGA_BOOT_TIMEOUT)
            qga.spawn(["sh", "-c", "sleep 0.5; echo c > /proc/sysrq-trigger"])
            with pytest.raises(VMDied, match="panicked"):
                machine.wait_for_console("this never appears", timeout=120)


def test_qmp_quit_ends_a_wait_with_vmdied(image: ImageManifest, tmp_path: Path) -> None:
    spec = MachineSpec(name="quit", network=False)
    with Machine(image, tmp_path / "vm", spec, display=False) as machine:
        assert machine.agent_port is None and "-nic" in machine.argv

        def quit_from_elsewhere() -> None:
            with contextlib.suppress(VMDied):  # the answer may lose the race with the exit
                machine.qmp("quit")

        threading.Timer(1.0, quit_from_elsewhere).start()
        with pytest.raises(VMDied):
            machine.wait_for_console("this never appears", timeout=120)
        with pytest.raises(VMDied):
            machine.check_alive()


def test_bad_qemu_arguments_raise_vmlauncherror_with_the_output(
    image: ImageManifest, tmp_path: Path
) -> None:
    machine = Machine(
        image, tmp_path / "vm", MachineSpec(accel="tcg"),
        extra_args=("-device", "no-such-device-xyz"),
    )
    with pytest.raises(VMLaunchError) as caught:
        machine.start()
    assert caught.value.exitcode == 1
    assert "no-such-device-xyz" in caught.value.output
    assert caught.value.command[0] == "qemu-system-x86_64"
    assert not machine.is_running()


def test_missing_base_disk_is_a_launch_error_before_qemu_runs(
    image: ImageManifest, tmp_path: Path
) -> None:
    missing = replace(image, disk=tmp_path / "gone.qcow2")
    with pytest.raises(VMLaunchError, match="does not exist"):
        Machine(missing, tmp_path / "vm").start()


def test_kvm_without_kernel_progress_in_time_falls_back_to_tcg_and_says_why(
    image: ImageManifest, tmp_path: Path
) -> None:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no /dev/kvm here")
    # No kernel prints within 0 s of QEMU's start, so this KVM counts as stalled whatever
    # this host's KVM would do: the fallback is taken every time, not only on a bad host.
    stalls = Machine(image, tmp_path / "vm", MachineSpec(accel="kvm"), kvm_progress_seconds=0)
    with stalls as machine:
        assert machine.accel == "tcg"
        assert machine.accel_reason is not None
        assert "no kernel progress on the console within 0 s" in machine.accel_reason
        assert "restarted under TCG" in machine.accel_reason
        assert machine.argv[machine.argv.index("-accel") + 1] == "tcg"  # QEMU really restarted
        machine.wait_for_console(r"\S", timeout=60)  # the restarted guest boots
