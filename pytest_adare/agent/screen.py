"""The guest's screen and input through the agent's GUI tools (pyautogui in the guest).

:class:`AgentScreen` is the agent-side implementation of the screen the Guest facade
drives; :class:`pytest_adare.machine_tools.screen.QemuScreen` is the host-side one. The agent
sees the guest's X display as the desktop session does (window titles, the real
keymap), but needs a display the agent can reach.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Sequence

from PIL import Image

from adare_guest.tool_names import (
    CLICK,
    DOUBLE_CLICK,
    DRAG,
    GOTO,
    KEYBOARD,
    RIGHT_CLICK,
    SCREENSHOT,
    SCROLL,
)
from pytest_adare.agent.transfer import CheckedCall
from pytest_adare.errors import ToolError

_CLICK_TOOLS = {("left", 1): CLICK, ("left", 2): DOUBLE_CLICK, ("right", 1): RIGHT_CLICK}
MAX_SCREENSHOT_PIXELS = 7680 * 4320
"""Largest screenshot the host decodes (an 8K screen, 127 MiB as RGBA): the guest's PNG
declares its size in a few bytes, and a small file can claim a huge image."""


def decode_screenshot(png: bytes, max_pixels: int = MAX_SCREENSHOT_PIXELS) -> Image.Image:
    """The image in ``png``, its declared size checked before any pixel is decoded.

    :raise ToolError: not a readable PNG, or larger than ``max_pixels``.
    """
    try:
        with warnings.catch_warnings():  # PIL's own bomb warning: the check below decides
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(png))  # reads the header (IHDR) only
        width, height = image.size
        if width * height > max_pixels:
            raise ToolError(
                SCREENSHOT,
                f"the agent's PNG declares {width}x{height} pixels, above the host's bound "
                f"of {max_pixels} (MAX_SCREENSHOT_PIXELS); not decoded",
                None,
            )
        image.load()
    except (ValueError, OSError, Image.DecompressionBombError) as exc:
        raise ToolError(SCREENSHOT, f"the agent sent no readable PNG: {exc}", None) from exc
    return image


class AgentScreen:
    """Screen and input of the guest's desktop through agent tool calls."""

    def __init__(self, call: CheckedCall) -> None:
        self._call = call

    async def screenshot(self) -> Image.Image:
        result = await self._call(SCREENSHOT)
        try:
            png = base64.b64decode(result["image"]["data"], validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            raise ToolError(SCREENSHOT, f"the agent sent no readable PNG: {exc}", None) from exc
        return decode_screenshot(png)

    async def move(self, x: int, y: int) -> None:
        await self._call(GOTO, x=x, y=y)

    async def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        tool = _CLICK_TOOLS.get((button, count))
        if tool is None:
            raise ValueError(
                f"the agent's GUI tools click left once or twice or right once, "
                f"not {button} x{count}"
            )
        await self._call(tool, x=x, y=y)

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        await self._call(DRAG, x1=x1, y1=y1, x2=x2, y2=y2)

    async def scroll(self, direction: str, amount: int) -> None:
        await self._call(SCROLL, direction=direction, amount=amount)

    async def type_text(self, text: str) -> None:
        await self._call(KEYBOARD, type="type", key=text)

    async def press(self, key: str) -> None:
        await self._call(KEYBOARD, type="press", key=key)

    async def hotkey(self, keys: Sequence[str]) -> None:
        await self._call(KEYBOARD, type="hotkey", key="+".join(keys))
