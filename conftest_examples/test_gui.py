"""GUI scenario on the desktop image: type in the terminal, look at the screen.

The VM is ready once a window holds the keyboard focus: on the built-in desktop image,
the terminal.
"""

import pytest

from pytest_adare.guest import Guest


@pytest.mark.adare_vm(image="debian-desktop", gui=True)
def test_typed_command_runs_in_the_terminal(guest: Guest) -> None:
    guest.keyboard.type("echo typed-by-adare > /tmp/typed.txt")
    guest.keyboard.press("enter")
    guest.wait_until_succeeds("test -s /tmp/typed.txt", timeout=30)

    assert guest.shell("cat /tmp/typed.txt").stdout == "typed-by-adare\n"
    screen = guest.screenshot().convert("L")
    assert screen.getextrema()[0] < screen.getextrema()[1]  # not a blank screen
