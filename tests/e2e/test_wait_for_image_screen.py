"""wait_for_image on a real VM screen (QMP screendump of the built-in image's console).

Run with ``--adare-vm=debian``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pytest_adare.image_match import ImageNotFound, wait_for_image
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e


def test_template_cut_from_the_screen_is_found_there(adare_vm: VM) -> None:
    screen = adare_vm.screendump()
    template = screen.crop((0, 0, 240, 18))  # the first text line of the console
    box = asyncio.run(wait_for_image(adare_vm.screendump, template, timeout=30))
    assert (box.x, box.y, box.width, box.height) == (0, 0, 240, 18)
    assert box.score > 0.99


def test_absent_template_times_out_with_the_last_screen_saved(adare_vm: VM) -> None:
    rng = np.random.default_rng(7)
    absent = Image.fromarray(rng.integers(0, 256, (30, 60), dtype=np.uint8))
    with pytest.raises(ImageNotFound) as caught:
        asyncio.run(wait_for_image(adare_vm.screendump, absent, timeout=2))
    saved = caught.value.screenshot_path
    assert saved is not None and str(saved) in str(caught.value)
    with Image.open(saved) as image:
        assert image.size == adare_vm.screendump().size
    Path(saved).unlink()
