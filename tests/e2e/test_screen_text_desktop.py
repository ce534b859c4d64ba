"""Text-driven GUI on the built-in desktop image: read, wait for and click what is shown.

One VM for the module, booted with ``launch()``'s defaults (``gui="auto"``: the agent's
screen, since the image has a desktop). The dialogs are the image's Tk demo
(``/adare/init/demo-dialog.sh``); a clicked button is verified by the label the dialog
writes to its output file and by the dialog's process having exited. Window positions
come from X (python-xlib in the guest), not from the OCR under test.
"""

from __future__ import annotations

import json
import random
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from image_under_test import desktop_image_under_test
from PIL import Image

from adare_guest.config import DEFAULT_PORT
from pytest_adare import launch
from pytest_adare.errors import AdareError
from pytest_adare.guest import Guest
from pytest_adare.screen.match import TemplateMatcher
from pytest_adare.screen.text import TextNotFound, find_text
from pytest_adare.vm import VM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DIALOG = "/adare/init/demo-dialog.sh"
WAIT = 90  # OCR + TCG: a dialog takes seconds to map, a screenshot ~1 s

# Prints "x y width height" of the top-level window whose WM_CLASS or title contains
# argv[1], in root coordinates (the frame's content, without openbox's decorations).
GEOMETRY_PROBE = r"""
import sys
from Xlib import display
d = display.Display(":0")
root = d.screen().root
def walk(window):
    for child in window.query_tree().children:
        names = " ".join(child.get_wm_class() or ()) + " " + str(child.get_wm_name() or "")
        geometry = child.get_geometry()
        if sys.argv[1] in names and geometry.width > 1:
            at = child.translate_coords(root, 0, 0)
            print(-at.x, -at.y, geometry.width, geometry.height)
            sys.exit(0)
        walk(child)
walk(root)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    manifest = desktop_image_under_test()
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path_factory.mktemp("vm"), progress=None
    ) as running:
        yield running


@pytest.fixture(scope="module")
def desktop(vm: VM) -> Guest:
    return vm.guest


def window_box(guest: Guest, name: str) -> tuple[int, int, int, int]:
    result = guest.shell(
        f"python3 - '{name}' <<'ADARE_EOF'\n{GEOMETRY_PROBE}\nADARE_EOF", timeout=60
    )
    assert result.returncode == 0, f"no window {name!r}: {result.stderr}"
    x, y, width, height = (int(v) for v in result.stdout.split())
    return x, y, width, height


def open_dialog(guest: Guest, title: str, *args: str) -> str:
    """Start the demo dialog titled ``title``; the path its clicked label goes to."""
    output = f"/tmp/{title}.out"
    guest.shell(
        f"rm -f {output}; setsid {DIALOG} --title {title} --output {output} {' '.join(args)} "
        f"> /tmp/{title}.log 2>&1 < /dev/null &"
    ).check()
    return output


def clicked_label(guest: Guest, title: str, output: str) -> str:
    """The label the dialog wrote as it exited."""
    guest.wait_for_file(output, timeout=30)  # the dialog writes it as it exits
    return guest.succeed(f"cat {output}").strip()


def close_dialog(guest: Guest, title: str) -> None:
    guest.shell(f"pkill -f -- '--title {title} '; true")


def test_auto_picks_the_agents_screen_on_the_desktop_image(vm: VM) -> None:
    assert vm.options.gui == "auto" and vm.gui == "agent"
    # A cold boot asks the agent for a screenshot; a warm start takes what its saved
    # state recorded (the same RAM, the same X server).
    assert vm.gui_choice is not None and vm.gui_choice.reason in (
        "auto: the image has a desktop and the agent's screenshot works",
        "auto: the agent's screenshot worked in the saved ready state",
    )


def test_text_typed_into_the_terminal_is_read_inside_the_terminal_window(desktop: Guest) -> None:
    # No "m": xterm's 6x13 M is read as H now and then (docs/performance.md).
    word = random.choice(["orange", "violet", "copper", "silver", "garden", "harbor"])
    marker = f"typed {word} {''.join(random.choices('23456', k=4))}"
    desktop.keyboard.type(f"clear; echo '{marker}' | tr a-z A-Z")
    desktop.keyboard.press("enter")
    match = desktop.wait_for_text(marker.upper(), timeout=WAIT)
    assert match.text == marker.upper() and match.confidence > 0.4
    x, y, width, height = window_box(desktop, "xterm")
    assert x <= match.x and match.x + match.width <= x + width
    assert y <= match.y and match.y + match.height <= y + height
    assert match.line == marker.upper()  # the output line, which only the shell wrote


def test_a_reverse_video_line_in_the_terminal_reads(desktop: Guest) -> None:
    # xterm draws a selected line in reverse video: white on black inside the black on
    # white terminal, a 13 px band thinner than the 40 px polarity median. OCR read
    # neither it nor the line around it (issue 34 item 20). The program draws it here
    # (SGR 7, what a selection looks like) so no double click has to land in xterm's
    # 250 ms multi-click time on a slow guest.
    digits = "".join(random.choices("23456", k=4))
    lines = [f"ALPHA {digits}", f"BRAVO {digits}", f"CHARLIE {digits}"]
    # Typed in lower case (the command line is no match), upper-cased before printf: tr
    # after it would turn SGR 7's final 'm' into 'M' (delete lines).
    words = " ".join(line.lower() for line in lines)
    desktop.keyboard.type(
        f"clear; printf '%s %s\\n\\033[7m%s %s\\033[0m\\n%s %s\\n' "
        f"$(echo {words} | tr a-z A-Z)"
    )
    desktop.keyboard.press("enter")
    found = desktop.wait_for_text(lines[1], timeout=WAIT)
    assert found.text == lines[1]
    screen = desktop.screenshot()
    box = (found.x, found.y, found.x + found.width, found.y + found.height)
    assert np.asarray(screen.convert("L").crop(box)).mean() < 128  # light on dark, drawn
    assert [match.text for match in find_text(lines[2], screen)] == [lines[2]]


def test_click_text_ok_closes_the_dialog_with_ok(desktop: Guest) -> None:
    title = f"click{secrets.token_hex(3)}"
    output = open_dialog(desktop, title, "--message", "'Apply the update?'")
    try:
        desktop.wait_for_text("Apply the update?", timeout=WAIT)
        match = desktop.click_text("OK", timeout=WAIT)
        assert match.text == "OK"
        assert clicked_label(desktop, title, output) == "OK"
    finally:
        close_dialog(desktop, title)


def test_waiting_for_absent_text_times_out_with_the_screenshot_and_what_was_read(
    desktop: Guest,
) -> None:
    title = f"absent{secrets.token_hex(3)}"
    open_dialog(desktop, title, "--message", "'Nothing to see here'")
    try:
        desktop.wait_for_text("Nothing to see here", timeout=WAIT)
        with pytest.raises(TextNotFound) as raised:
            desktop.wait_for_text(re.compile(r"Installation (complete|finished)"), timeout=5)
    finally:
        close_dialog(desktop, title)
    error = raised.value
    assert "not read on screen within 5.0 s" in str(error)
    assert "Nothing to see here" in error.text and "Nothing to see here" in str(error)
    assert error.screenshot is not None and error.screenshot_path is not None
    with Image.open(error.screenshot_path) as saved:
        assert saved.size == desktop.screenshot().size
    error.screenshot_path.unlink()


def test_a_needle_with_the_clock_excluded_still_matches_and_clicks_after_it_ticked(
    desktop: Guest, tmp_path: Path
) -> None:
    title = f"needle{secrets.token_hex(3)}"
    output = open_dialog(desktop, title, "--clock", "--message", "'Keep these settings?'")
    try:
        desktop.wait_for_text("Keep these settings?", timeout=WAIT)
        x, y, width, height = window_box(desktop, title)
        before = desktop.screenshot()
        [clock] = desktop.find_text(re.compile(r"\d\d:\d\d:\d\d"), region=(x, y, width, height))
        [ok] = desktop.find_text("OK", region=(x, y, width, height))
        needle = tmp_path / "dialog.png"
        before.crop((x, y, x + width, y + height)).save(needle)
        pad = 6  # the clock's box from OCR is tight: leave room for wider digits
        needle.with_suffix(".json").write_text(
            json.dumps(
                {
                    "exclude": [
                        [clock.x - x - pad, clock.y - y - pad, clock.width + 2 * pad,
                         clock.height + 2 * pad]
                    ],
                    "threshold": 0.995,
                    "click": [ok.center[0] - x, ok.center[1] - y],
                }
            )
        )  # fmt: skip
        ticked = re.compile(rf"(?!{re.escape(clock.text)})\d\d:\d\d:\d\d")
        desktop.wait_for_text(ticked, WAIT, region=(x, y, width, height))
        after = desktop.screenshot()
        window = (x, y, width, height)
        plain = TemplateMatcher(Image.open(needle)).best(after, window)
        masked = TemplateMatcher(needle).best(after, window)
        assert not np.array_equal(  # the clock changed ...
            np.asarray(before.crop((x, y, x + width, y + height))),
            np.asarray(after.crop((x, y, x + width, y + height))),
        )
        assert plain.score < 0.995 <= masked.score  # ... so only the needle still matches
        box = desktop.click_image(needle, timeout=WAIT)
        assert (box.x, box.y) == (x, y)
        assert clicked_label(desktop, title, output) == "OK"
    finally:
        close_dialog(desktop, title)


def test_the_idle_desktop_reads_without_crashing_and_shows_the_terminal(desktop: Guest) -> None:
    # The black root window beside the xterm: tesserocr 2.13 raised 'No text returned'
    # here on a fresh clone.
    text = desktop.screen_text()
    assert "xterm" in text
    terminal = desktop.wait_for_window("^xterm$", timeout=WAIT)
    x, y, width, height = window_box(desktop, "xterm")
    assert (terminal.x, terminal.y, terminal.width, terminal.height) == (x, y, width, height)


def test_right_click_and_gone_on_a_dialog(desktop: Guest) -> None:
    title = f"gone{secrets.token_hex(3)}"
    output = open_dialog(desktop, title, "--message", "'Remove the share?'")
    try:
        dialog = desktop.wait_for_window(f"^{title}$", timeout=WAIT)
        desktop.wait_for_text("remove the SHARE", ignore_case=True, timeout=WAIT)
        # A right click is not a button press for Tk's buttons: the dialog stays.
        desktop.click_text("Cancel", timeout=WAIT, button="right", near=dialog.center)
        desktop.wait_for_window(f"^{title}$", timeout=5)  # still open
        assert desktop.fail(f"test -e {output}").returncode == 1
        desktop.click_text("Cancel", timeout=WAIT, near=dialog.center)
        assert desktop.wait_for_text("Remove the share?", timeout=WAIT, gone=True) is None
        assert clicked_label(desktop, title, output) == "Cancel"
    finally:
        close_dialog(desktop, title)


def test_console_and_unit_waits_on_a_guest_without_systemd(vm: VM, desktop: Guest) -> None:
    assert "adare-init: agent started" in vm.wait_for_console(r"agent started", timeout=WAIT)
    with pytest.raises(AdareError, match="does not run systemd"):
        desktop.wait_for_unit("display-manager.service", timeout=10)
    desktop.wait_for_port(DEFAULT_PORT, timeout=WAIT)  # the agent's own socket
