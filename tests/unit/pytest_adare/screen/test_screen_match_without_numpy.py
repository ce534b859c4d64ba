"""Template matching on a host without numpy: the module loads, matching names the extra."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from pytest_adare.screen import match as screen_match

REPO = Path(__file__).resolve().parents[4]


def screen_with_a_cross() -> Image.Image:
    image = Image.new("RGB", (64, 48), "white")
    draw = ImageDraw.Draw(image)
    draw.line((10, 10, 30, 30), fill="black", width=3)
    draw.line((10, 30, 30, 10), fill="black", width=3)
    return image


@pytest.fixture
def no_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes `import numpy` fail as it does where numpy is not installed.
    for name in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "numpy", None)


def test_importing_screen_match_and_the_guest_facade_loads_no_numpy() -> None:
    probe = (
        "import sys, pytest_adare.screen.match, pytest_adare.guest\n"
        "print('numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert result.stdout.strip() == "False"


@pytest.mark.usefixtures("no_numpy")
def test_find_without_numpy_names_the_extra_to_install() -> None:
    screen = screen_with_a_cross()
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'pytest-adare\[match\]'") as info:
        screen_match.find(screen.crop((5, 5, 35, 35)), screen)
    assert info.value.name == "numpy"


@pytest.mark.usefixtures("no_numpy")
def test_wait_for_image_without_numpy_fails_before_taking_a_screenshot() -> None:
    taken: list[int] = []

    def screenshot() -> Image.Image:
        taken.append(1)
        return screen_with_a_cross()

    template = screen_with_a_cross().crop((5, 5, 35, 35))
    with pytest.raises(ModuleNotFoundError, match=r"pytest-adare\[match\]"):
        asyncio.run(screen_match.wait_for_image(screenshot, template, timeout=1))
    assert taken == []


def test_with_numpy_the_same_call_finds_the_cross() -> None:
    screen = screen_with_a_cross()
    box = screen_match.find(screen.crop((5, 5, 35, 35)), screen)
    assert box is not None and (box.x, box.y, box.width, box.height) == (5, 5, 30, 30)
