"""GUI on the built-in desktop image: screenshots, typing, template waits, host-side input.

One VM for the module. The image is ``$ADARE_TEST_DESKTOP_IMAGE``, else the built-in
``debian-desktop`` (built on first use; see ``image_under_test.py``). Its init starts X,
openbox and an xterm that has the keyboard focus; what is typed is verified through
files the typed commands write, read back with ``guest.shell``. The same VM, registered
as ``adare-vm run`` registers its own, is entered with ``adare-vm shell`` as root and as
the desktop's user.
"""

from __future__ import annotations

import random
import secrets
import string
from collections.abc import Iterator

import numpy as np
import pytest
from image_under_test import desktop_image_under_test
from PIL import Image
from terminal_checks import adare_vm, check_terminal, registered

from pytest_adare import launch
from pytest_adare.agent.desktop_ready import await_focused_window
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.screen import QemuScreen
from pytest_adare.screen.match import Box, ImageNotFound
from pytest_adare.vm import VM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FILE_TIMEOUT = 60  # typed text reaches the file through X, xterm and the shell
TYPEABLE = string.ascii_letters + string.digits + string.punctuation + " "
SESSION_PROBE = 'xset q >/dev/null && echo "$DISPLAY ${DBUS_SESSION_BUS_ADDRESS#unix:path=}"'


@pytest.fixture(scope="module")
def manifest() -> ImageManifest:
    return desktop_image_under_test()


@pytest.fixture(scope="module")
def vm(manifest: ImageManifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path_factory.mktemp("vm"), progress=None
    ) as running:
        yield running


def test_start_waits_until_the_terminal_holds_the_keyboard_focus(vm: VM) -> None:
    phases = [phase.name for phase in vm.phases]
    if "warm" in phases:
        # A warm start loads a state saved after a cold start's desktop phase: the
        # terminal still holds the focus in it.
        focused = shared_loop().run(await_focused_window(vm.guest.aio, 20), timeout=90)
        assert "xterm" in focused.lower()
    else:
        assert phases.index("connect") < phases.index("desktop") < phases.index("gui")
        desktop = next(phase for phase in vm.phases if phase.name == "desktop")
        assert "xterm" in desktop.detail.lower()


@pytest.fixture(scope="module")
def desktop(vm: VM) -> Guest:
    """The agent-side facade (what the default ``gui="auto"`` picks on a desktop image)."""
    return vm.guest


@pytest.fixture(scope="module")
def host_side(vm: VM, manifest: ImageManifest) -> Guest:
    """The facade as ``gui="host"`` builds it: screen and input through QMP.

    Same VM (one desktop boot less), same classes the VM uses for ``gui="host"``.
    """
    return Guest(
        AsyncGuest(vm.guest.aio.connection, screen=QemuScreen(vm.machine, manifest.display))
    )


def read_when_written(guest: Guest, path: str) -> str:
    """The content of ``path`` once it exists (bounded wait inside the guest)."""
    guest.wait_for_file(path, timeout=FILE_TIMEOUT)
    return guest.succeed(f"cat {path}")


def detailed_crop(screen: Image.Image, size: tuple[int, int] = (160, 48)) -> tuple[int, int]:
    """The top-left corner of the ``size`` window with the most contrast on a coarse grid."""
    grey = np.asarray(screen.convert("L"), dtype=np.float64)
    width, height = size
    corners = [
        (x, y)
        for y in range(0, screen.height - height, height // 2)
        for x in range(0, screen.width - width, width // 2)
    ]
    return max(corners, key=lambda c: float(grey[c[1] : c[1] + height, c[0] : c[0] + width].std()))


def test_agent_screenshot_is_not_blank_and_has_the_host_screendump_size(
    vm: VM, desktop: Guest, manifest: ImageManifest
) -> None:
    shot = desktop.screenshot()
    grey = np.asarray(shot.convert("L"))
    assert int(grey.max()) - int(grey.min()) > 64, "the screenshot is one flat colour"
    assert len(shot.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 2
    host = vm.screendump()
    assert shot.size == host.size
    assert manifest.display is None or shot.size == manifest.display


def test_typing_reaches_the_focused_terminal(desktop: Guest) -> None:
    marker = f"typed-{secrets.token_hex(6)}"
    desktop.keyboard.type(f"echo {marker} > /tmp/typed.txt")
    desktop.keyboard.press("enter")
    assert read_when_written(desktop, "/tmp/typed.txt") == f"{marker}\n"


def type_and_read_back(guest: Guest, path: str, text: str) -> str:
    """Type ``cat > part`` + ``text`` into the terminal, end it, return what the file holds."""
    guest.shell(f"rm -f {path} {path}.part").check()
    guest.keyboard.type(f"cat > {path}.part && mv {path}.part {path}")
    guest.keyboard.press("enter")
    guest.keyboard.type(text)
    guest.keyboard.press("enter")
    guest.keyboard.hotkey("ctrl", "d")
    return read_when_written(guest, path)


def test_the_session_has_key_autorepeat_off(desktop: Guest) -> None:
    # A key-up later than X's repeat delay (a loaded TCG guest) must not type the key twice.
    settings = desktop.user.run("xset q").check().stdout
    assert "auto repeat:  off" in settings, settings


def test_500_typed_characters_arrive_exactly(desktop: Guest) -> None:
    text = "".join(random.Random(500).choices(TYPEABLE, k=500))
    assert type_and_read_back(desktop, "/tmp/long.txt", text) == text + "\n"


def test_wait_for_image_finds_a_template_cut_from_a_screenshot(desktop: Guest) -> None:
    screen = desktop.screenshot()
    x, y = detailed_crop(screen)
    template = screen.crop((x, y, x + 160, y + 48))
    box = desktop.wait_for_image(template, timeout=30)
    assert isinstance(box, Box)
    assert (box.width, box.height) == template.size and box.score >= 0.9
    found = desktop.screenshot().crop((box.x, box.y, box.x + box.width, box.y + box.height))
    assert np.array_equal(np.asarray(found.convert("RGB")), np.asarray(template.convert("RGB")))


def test_wait_for_image_times_out_with_the_last_screenshot(desktop: Guest) -> None:
    noise = np.random.default_rng(7).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    with pytest.raises(ImageNotFound) as raised:
        desktop.wait_for_image(Image.fromarray(noise), timeout=3)
    error = raised.value
    assert isinstance(error, TimeoutError)
    assert "not found on screen within 3.0 s" in str(error)
    assert error.screenshot is not None and error.screenshot_path is not None
    with Image.open(error.screenshot_path) as saved:
        assert saved.size == error.screenshot.size == desktop.screenshot().size
    error.screenshot_path.unlink()


def test_host_side_screendump_and_typing_reach_the_terminal(
    vm: VM, host_side: Guest, desktop: Guest, manifest: ImageManifest
) -> None:
    screen = host_side.screenshot()
    assert screen.size == vm.screendump().size
    assert manifest.display is None or screen.size == manifest.display
    marker = f"host-{secrets.token_hex(6)}"
    host_side.keyboard.type(f"echo {marker} > /tmp/host-typed.txt")
    host_side.keyboard.press("enter")
    assert read_when_written(desktop, "/tmp/host-typed.txt") == f"{marker}\n"


def test_host_side_typing_delivers_500_characters(host_side: Guest) -> None:
    text = "".join(random.Random(501).choices(TYPEABLE, k=500))
    assert type_and_read_back(host_side, "/tmp/host-long.txt", text) == text + "\n"


def test_adare_vm_shell_as_root_and_as_the_desktop_user(vm: VM, desktop: Guest) -> None:
    """The terminal on the desktop image: scripted and on a pty, Ctrl-C reaching the
    guest's ``sleep``, as root and as ``guest.user`` (the user whose X session runs)."""
    user = desktop.user.name
    assert user != "root"
    with registered(vm, "debian-desktop") as name:
        check_terminal(name, None, "root")
        check_terminal(name, user, user)
        # In the user's session, as guest.user.run: the screen and the session bus.
        session = adare_vm("shell", name, "--user", user, "--", "sh", "-c", SESSION_PROBE)
        assert (session.returncode, session.stdout) == (0, f":0 /run/user/{desktop.user.uid}/bus\n")
