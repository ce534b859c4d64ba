"""Template matching on generated screens, and waiting for an image to appear."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from adare_guest.protocol import Event, EventType
from pytest_adare.guest import EventHub
from pytest_adare.screen import wait as screen_wait
from pytest_adare.screen.match import Box, ImageNotFound, find, wait_for_image


def noise_screen(seed: int, width: int = 1024, height: int = 768) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def desktop(with_button: bool) -> Image.Image:
    """A flat desktop with a few windows; the button is drawn only when asked."""
    pixels = np.full((768, 1024, 3), (40, 80, 120), dtype=np.uint8)
    pixels[100:400, 200:700] = (230, 230, 230)
    pixels[120:140, 220:680] = (20, 20, 160)
    if with_button:
        pixels[500:540, 600:700] = (200, 200, 200)
        pixels[505:535, 610:690:8] = (0, 0, 0)  # some "text" stripes
    return Image.fromarray(pixels)


BUTTON = desktop(True).crop((590, 490, 710, 550))


def test_template_cut_from_the_screen_is_found_exactly() -> None:
    screen = noise_screen(1)
    template = screen.crop((300, 200, 380, 240))
    assert find(template, screen) == Box(300, 200, 80, 40, pytest.approx(1.0))


def test_match_survives_brightness_and_contrast_changes() -> None:
    screen = noise_screen(2)
    template = np.asarray(screen.crop((10, 700, 90, 760)), dtype=np.float64) * 0.5 + 40
    box = find(template, screen, threshold=0.95)
    assert box is not None and (box.x, box.y) == (10, 700)


def test_absent_template_is_not_found() -> None:
    assert find(noise_screen(3).crop((0, 0, 60, 60)), noise_screen(4)) is None


def test_region_limits_the_search_and_keeps_screen_coordinates() -> None:
    screen = desktop(True)
    box = find(BUTTON, screen, region=(500, 400, 300, 200))
    assert box is not None and (box.x, box.y) == (590, 490)
    assert find(BUTTON, screen, region=(0, 0, 500, 400)) is None


@pytest.mark.parametrize(
    ("template", "region", "message"),
    [
        (Image.new("RGB", (20, 20), "red"), None, "no contrast"),
        (noise_screen(5, 50, 50), (0, 0, 40, 40), "larger than the searched area"),
        (noise_screen(5, 10, 10), (1000, 0, 100, 100), "not inside the 1024x768 screen"),
    ],
)
def test_unusable_inputs_raise_clear_errors(
    template: Image.Image, region: tuple[int, int, int, int] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        find(template, noise_screen(6), region=region)


@pytest.mark.asyncio
async def test_wait_returns_once_the_image_appears() -> None:
    shots = iter([desktop(False)] * 3 + [desktop(True)] * 100)

    async def screenshot() -> Image.Image:
        return next(shots)

    box = await wait_for_image(screenshot, BUTTON, timeout=30)
    assert (box.x, box.y, box.width, box.height) == (590, 490, 120, 60)


@pytest.mark.asyncio
async def test_gui_event_wakes_the_wait_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(screen_wait, "FIRST_DELAY", 60.0)  # polling alone would time out
    hub, clicked, taken = EventHub(), asyncio.Event(), []

    def screenshot() -> Image.Image:
        taken.append(1)
        return desktop(clicked.is_set())

    async def click_later() -> None:
        await asyncio.sleep(0.2)
        clicked.set()
        await hub.dispatch(Event(EventType.GUI_CLICK, {"call_id": "c1"}))

    clicker = asyncio.create_task(click_later())
    box = await wait_for_image(screenshot, BUTTON, timeout=20, events=hub)
    await clicker
    assert (box.x, box.y) == (590, 490) and len(taken) == 2


def saved_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as saved:
        size = saved.size
    path.unlink()
    return size


@pytest.mark.asyncio
async def test_timeout_names_the_saved_last_screenshot() -> None:
    async def screenshot() -> Image.Image:
        return desktop(False)

    with pytest.raises(ImageNotFound) as caught:
        await wait_for_image(screenshot, BUTTON, timeout=0.3, threshold=0.95)
    error = caught.value
    assert error.screenshot_path is not None and str(error.screenshot_path) in str(error)
    assert "not found on screen within 0.3 s" in str(error)
    assert "1 distinct screens checked" in str(error)
    assert saved_size(error.screenshot_path) == (1024, 768)
