"""The built-in images, built through the cache and booted for real (issue 4).

Building needs root and a Debian mirror; the first run builds (about a minute for
the console image, a few for the desktop), later runs reuse the cached image.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from image_files import debugfs_exists, initramfs_stand_in_left

from pytest_adare.errors import VMTimeout
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.cache import cached_builtin_image
from pytest_adare.image.manifest import ImageManifest, load_manifest
from pytest_adare.image_check import check_image
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.machine_tools.qga import QGAClient
from pytest_adare.qemu.machine import Machine

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="building a Debian image needs root"),
]

# Which window has the keyboard focus, as the agent's pyautogui would see X.
_FOCUS_SCRIPT = """
from Xlib import display
d = display.Display(":0")
w = d.get_input_focus().focus
while w and not isinstance(w, int):
    cls = w.get_wm_class()
    if cls:
        print(cls[1]); break
    w = w.query_tree().parent
"""


def _built(name: str) -> ImageManifest:
    return load_manifest(cached_builtin_image(name, progress=print))


def test_console_image_boots_to_a_working_agent(tmp_path: Path) -> None:
    manifest = _built("debian")
    assert manifest.agent.baked and manifest.agent.fw_cfg and not manifest.desktop
    lines: list[str] = []
    report = check_image(str(manifest.path), accel="tcg", progress=lines.append, workdir=tmp_path)
    assert report.ok, "\n".join(lines)
    assert list(report.phases) == ["qemu", "console", "init", "qga", "agent", "handoff"]
    assert report.agent["platform"] == "linux"
    # The run wrote to an overlay only: the base disk is what the manifest recorded.
    assert file_sha256(manifest.disk) == manifest.disk_sha256
    # The build's stand-in for update-initramfs (no initramfs packed while the packages
    # go in: image/rootfs.py) is gone, and so is the kernel's initramfs-tools.
    assert initramfs_stand_in_left(manifest.disk, tmp_path) == []
    assert not debugfs_exists(manifest.disk, "/usr/sbin/update-initramfs", tmp_path)


def test_guest_poweroff_ends_qemu(tmp_path: Path) -> None:
    manifest = _built("debian")
    with Machine(manifest, tmp_path / "vm", MachineSpec(accel="tcg")) as vm:
        vm.wait_for_console(r"adare-init: qemu-ga started", 120)
        with QGAClient(vm.qga_path) as qga:
            qga.sync(timeout=60)
            assert qga.exec(["/bin/busybox", "ls", "/adare/agent"]).stdout == b"bundle.pyz\n"
            qga.spawn(["/sbin/poweroff"])
        deadline = time.monotonic() + 60
        while vm.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not vm.is_running(), "\n".join(vm.console_tail(20))


@pytest.mark.slow
def test_desktop_image_shows_a_focused_terminal_on_the_vm_display(tmp_path: Path) -> None:
    manifest = _built("debian-desktop")
    assert manifest.desktop and manifest.display == (1024, 768)
    report = check_image(
        str(manifest.path), accel="tcg", progress=print, workdir=tmp_path / "check", timeout=300
    )
    assert report.ok, report.failure
    with Machine(manifest, tmp_path / "vm", MachineSpec(accel="tcg")) as vm:
        vm.wait_for_console(r"adare-init: desktop started", 300)
        with QGAClient(vm.qga_path) as qga:
            qga.sync(timeout=120)
            focus = _wait_for_focus(qga, "XTerm", vm)
            assert focus == "XTerm"
            # Keys typed through QEMU's virtual keyboard reach the focused terminal.
            vm.type_text("touch /tmp/typed-by-host\n")
            _wait_for_file(qga, "/tmp/typed-by-host", vm)
        screen = vm.screendump()
        assert screen.size == manifest.display
        darkest, brightest = screen.convert("L").getextrema()
        assert brightest - darkest > 64, "the screen is blank"


def _wait_for_focus(qga: QGAClient, wanted: str, vm: Machine, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        result = qga.exec(["/usr/bin/python3", "-c", _FOCUS_SCRIPT], timeout=60)
        seen = result.stdout.decode().strip() or result.stderr.decode().strip()[-200:]
        if seen == wanted:
            return seen
        time.sleep(1)
    raise VMTimeout(
        f"the {wanted} window to have the focus (last: {seen!r})", timeout, vm.console_tail(20)
    )


def _wait_for_file(qga: QGAClient, path: str, vm: Machine, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if qga.exec(["/bin/busybox", "test", "-e", path]).exitcode == 0:
            return
        time.sleep(0.5)
    raise VMTimeout(f"{path} to appear in the guest", timeout, vm.console_tail(20))
