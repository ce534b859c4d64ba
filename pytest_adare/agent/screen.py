"""The guest's screen and input through the agent's GUI tools (pyautogui in the guest).

:class:`AgentScreen` is the agent-side implementation of the screen the Guest facade
drives; :class:`pytest_adare.qemu.screen.QemuScreen` is the host-side one. The agent
sees the guest's X display as the desktop session does (window titles, the real
keymap), but needs a display the agent can reach.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

from PIL import Image

from pytest_adare.agent.transfer import CheckedCall
from pytest_adare.errors import ToolError

_CLICK_TOOLS = {("left", 1): "click", ("left", 2): "double_click", ("right", 1): "right_click"}


class AgentScreen:
    """Screen and input of the guest's desktop through agent tool calls."""

    def __init__(self, call: CheckedCall) -> None:
        self._call = call

    async def screenshot(self) -> Image.Image:
        result = await self._call("screenshot")
        try:
            png = base64.b64decode(result["image"]["data"], validate=True)
            image = Image.open(io.BytesIO(png))
            image.load()
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ToolError("screenshot", f"the agent sent no readable PNG: {exc}", None) from exc
        return image

    async def move(self, x: int, y: int) -> None:
        await self._call("goto", x=x, y=y)

    async def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        tool = _CLICK_TOOLS.get((button, count))
        if tool is None:
            raise ValueError(
                f"the agent's GUI tools click left once or twice or right once, "
                f"not {button} x{count}"
            )
        await self._call(tool, x=x, y=y)

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        await self._call("drag", x1=x1, y1=y1, x2=x2, y2=y2)

    async def scroll(self, direction: str, amount: int) -> None:
        await self._call("scroll", direction=direction, amount=amount)

    async def type_text(self, text: str) -> None:
        await self._call("keyboard", type="type", key=text)

    async def press(self, key: str) -> None:
        await self._call("keyboard", type="press", key=key)

    async def hotkey(self, keys: Sequence[str]) -> None:
        await self._call("keyboard", type="hotkey", key="+".join(keys))
