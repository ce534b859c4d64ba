"""GUI scenario on the desktop image: type in the terminal, look at the screen."""

import pytest

from pytest_adare.guest import Guest


@pytest.mark.adare_vm(image="debian-desktop", gui=True)
def test_typed_command_runs_in_the_terminal(terminal: Guest) -> None:
    terminal.keyboard.type("echo typed-by-adare > /tmp/typed.txt")
    terminal.keyboard.press("enter")
    terminal.shell("for i in $(seq 50); do [ -s /tmp/typed.txt ] && break; sleep 0.2; done")

    assert terminal.shell("cat /tmp/typed.txt").stdout == "typed-by-adare\n"
    screen = terminal.screenshot().convert("L")
    assert screen.getextrema()[0] < screen.getextrema()[1]  # not a blank screen
