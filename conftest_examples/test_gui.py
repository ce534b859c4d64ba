"""GUI scenario on the desktop image: type in the terminal, look at the screen."""

import pytest

from pytest_adare.guest import Guest


@pytest.mark.adare_vm(image="debian-desktop", gui=True)
def test_typed_command_runs_in_the_terminal(guest: Guest) -> None:
    guest.keyboard.type("echo typed-by-adare > /tmp/typed.txt")
    guest.keyboard.press("enter")
    guest.shell("for i in $(seq 50); do [ -s /tmp/typed.txt ] && break; sleep 0.2; done").check()

    assert guest.shell("cat /tmp/typed.txt").stdout == "typed-by-adare\n"
    screen = guest.screenshot()
    assert screen.width > 0 and len(set(screen.convert("L").getdata())) > 1
