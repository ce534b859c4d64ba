"""The built-in ``debian-xfce`` image: systemd, LightDM's autologin and an XFCE session.

What the scenarios in ``conftest_examples/test_xfce_desktop.py`` take for granted: the
boot finished with nothing failed, the desktop user's session is logind's and is what
``/run/adare/session.env`` says, programs ``guest.user`` runs reach its X server and
session bus, keys typed at once reach the session's terminal, the screen is the image's
size with no key autorepeat, and the panel draws text OCR reads. One VM for the module
(``scripts/test`` builds the image beside the checks); the console VM shows what
``guest.user.session()`` says where there is no logind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_adare import ToolError, launch
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

IMAGE = os.environ.get("ADARE_TEST_XFCE_IMAGE") or "debian-xfce"


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    with launch(IMAGE, workdir=tmp_path_factory.mktemp("vm"), progress=None) as running:
        yield running


def test_the_boot_finished_with_the_display_manager_and_nothing_failed(vm: VM) -> None:
    guest = vm.guest
    assert guest.succeed("cat /proc/1/comm").strip() == "systemd"
    assert guest.succeed("systemctl get-default").strip() == "graphical.target"
    guest.wait_for_unit("lightdm.service", timeout=60)
    guest.wait_for_unit("user@1000.service", timeout=60)
    failed = guest.shell("systemctl list-units --state=failed --no-legend --plain").stdout
    assert (guest.shell("systemctl is-system-running").stdout.strip(), failed.strip()) == (
        "running", "",
    )  # fmt: skip


def test_keys_typed_at_once_reach_the_sessions_terminal(vm: VM) -> None:
    # The ready state is saved once the terminal, not xfwm4's own window, holds the focus:
    # keys typed the moment a test starts are the shell's (the adare experiments type).
    vm.guest.keyboard.type("echo $((6*7)) > /tmp/typed-keys")
    vm.guest.keyboard.press("enter")
    vm.guest.wait_until_succeeds("grep -qx 42 /tmp/typed-keys", timeout=60)


def test_the_users_session_is_logind_s_and_session_env_describes_it(vm: VM) -> None:
    user = vm.guest.user
    session = user.session()
    assert session is not None and (session.seat, session.display) == ("seat0", ":0")
    env = user.info().env
    assert (env["USER"], env["DISPLAY"], env["XDG_CURRENT_DESKTOP"]) == ("user", ":0", "XFCE")
    assert env["DBUS_SESSION_BUS_ADDRESS"] == f"unix:path=/run/user/{user.uid}/bus"
    # The session's own programs run with the same bus and X server.
    xfdesktop = vm.guest.succeed("pgrep -u user -x xfdesktop").split()[0]
    theirs = vm.guest.succeed(f"tr '\\0' '\\n' < /proc/{xfdesktop}/environ").splitlines()
    assert f"DBUS_SESSION_BUS_ADDRESS={env['DBUS_SESSION_BUS_ADDRESS']}" in theirs
    assert {"DISPLAY=:0", f"XDG_SESSION_ID={session.id}"} <= set(theirs)
    # ... and in the session's scope, where logind put the session's processes.
    cgroup = vm.guest.succeed(f"cat /proc/{xfdesktop}/cgroup")
    assert f"session-{session.id}.scope" in cgroup, cgroup


def test_programs_of_guest_user_reach_the_session_bus_and_the_x_server(vm: VM) -> None:
    user = vm.guest.user
    names = user.run(
        "dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus "
        "org.freedesktop.DBus.ListNames"
    ).check()
    assert "org.xfce.Xfconf" in names.stdout and "org.xfce.SessionManager" in names.stdout
    xset = user.run("xset q").check().stdout
    assert "auto repeat:  off" in xset, xset
    assert user.run("id -un").check().stdout.strip() == "user"


def test_the_screen_is_the_images_size_and_the_panel_reads(vm: VM) -> None:
    assert vm.guest.screenshot().size == (1024, 768)
    # The panel's application menu, at the top left.
    vm.guest.wait_for_text("Applications", timeout=60, region=(0, 0, 300, 30))


def test_a_guest_without_logind_says_so(console_vm: VM) -> None:
    with pytest.raises(ToolError, match="the guest runs no logind"):
        console_vm.guest.user.session()
