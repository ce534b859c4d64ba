"""The default GUI mode on the built-in console image: QEMU's screen, read with OCR.

One VM for the module (``console_vm``: booted with ``launch()``'s defaults, so
``gui="auto"``). The console image has no desktop: screenshots are QMP screendumps of
the VGA text console, where a line echoed to ``/dev/tty1`` shows.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image

from pytest_adare.vm import VM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def marker() -> str:
    # No 0/1 (O/l) and no 7: tesseract reads the VGA font's 7 as "?" now and then (docs/
    # performance.md); the match must be exact.
    return "MARKER-" + "".join(random.choices("2345689", k=6))


def show_on_tty1(vm: VM, text: str) -> None:
    """Clear the VGA console (ESC c) and print ``text`` on it."""
    vm.guest.shell(f"printf '\\033c%s\\n' '{text}' > /dev/tty1").check()


def contrast(image: Image.Image) -> int:
    grey = np.asarray(image.convert("L"), dtype=np.int16)
    return int(grey.max()) - int(grey.min())


def test_auto_picks_qemus_screen_for_an_image_without_desktop_and_says_why(
    console_vm: VM,
) -> None:
    assert console_vm.options.gui == "auto"
    assert console_vm.gui == "host"
    choice = console_vm.gui_choice
    assert choice is not None and "no desktop" in choice.reason
    [phase] = [p for p in console_vm.phases if p.name == "gui"]
    assert phase.detail == choice.describe()


def test_screenshot_returns_the_vga_screen(console_vm: VM) -> None:
    show_on_tty1(console_vm, marker())
    shot = console_vm.guest.screenshot()
    assert shot.size == console_vm.screendump().size
    assert contrast(shot) > 64  # text on black


def test_wait_for_text_finds_a_line_printed_on_the_console(console_vm: VM) -> None:
    guest = console_vm.guest
    text = marker()
    assert guest.find_text(text) == []
    show_on_tty1(console_vm, text)
    match = guest.wait_for_text(text, timeout=60)
    assert match.text == text
    shot = guest.screenshot()
    assert 0 <= match.x and match.x + match.width <= shot.width
    assert match.y + match.height <= shot.height // 4  # the first line after the reset
    box = shot.crop((match.x, match.y, match.x + match.width, match.y + match.height))
    assert contrast(box) > 64, "the box around the text is blank"
    assert text in guest.screen_text()
