"""Helpers the example scenarios share."""

import time

import pytest

from pytest_adare.guest import Guest


@pytest.fixture
def terminal(guest: Guest) -> Guest:
    """The desktop guest once its terminal window is on screen (it then has the focus).

    The desktop starts in the background of the guest's boot, so the first test after
    boot may get there before the window does.
    """
    deadline = time.monotonic() + 120
    while guest.call("screenshot_window", window="xterm").get("status") != "success":
        if time.monotonic() > deadline:
            raise TimeoutError("no xterm window on the guest's screen within 120 s")
        time.sleep(0.5)
    return guest
