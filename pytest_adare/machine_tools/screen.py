"""The guest's screen and input as QEMU sees them: QMP ``screendump`` and ``input-send-event``.

:class:`QemuScreen` needs nothing inside the guest (no agent, no X), so it works on
console-only VMs, on guests whose desktop the agent cannot reach, and while the guest
is hung. Pointer positions are screen pixels, scaled to QEMU's absolute axes with the
last screenshot's size (one screendump is taken first when none was).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from PIL import Image

from pytest_adare.machine import input_events

CLICK_INTERVAL = 0.2
"""Seconds between the clicks of a double (or triple) click (see :meth:`QemuScreen.click`)."""


class InputMachine(Protocol):
    """What the screen needs of a machine (any backend with ``Capability.SCREENDUMP`` and
    ``Capability.INPUT``)."""

    async def ascreendump(self) -> Image.Image: ...
    async def asend_input(self, events: list[dict[str, Any]]) -> None: ...
    async def atype_text(self, text: str) -> None: ...


class QemuScreen:
    """Screen and input of a running machine through QMP."""

    def __init__(self, machine: InputMachine, size: tuple[int, int] | None = None) -> None:
        self.machine = machine
        self.size = size

    async def _size(self) -> tuple[int, int]:
        if self.size is None:
            await self.screenshot()
        assert self.size is not None
        return self.size

    async def screenshot(self) -> Image.Image:
        image = await self.machine.ascreendump()
        self.size = image.size
        return image

    async def move(self, x: int, y: int) -> None:
        width, height = await self._size()
        absolute = input_events.scale_to_abs(x, width), input_events.scale_to_abs(y, height)
        await self.machine.asend_input(input_events.move_events(*absolute))

    async def _button(self, button: str, down: bool) -> None:
        await self.machine.asend_input(input_events.button_events(button, down))

    async def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        await self.move(x, y)
        for done in range(count):
            if done:
                # A second press soon after the first release is dropped by the guest
                # as a bounce (measured on the desktop image under TCG: Tk saw one click
                # with no gap and with 50 ms); 200 ms gets through and stays well inside
                # the 500 ms in which X toolkits count two clicks as a double click.
                await asyncio.sleep(CLICK_INTERVAL)
            await self._button(button, True)
            await self._button(button, False)

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        await self.move(x1, y1)
        await self._button("left", True)
        # QEMU's USB tablet folds a move into the queued report before it while the
        # buttons stay the same: a move sent before the guest has polled the press
        # turns the press into one at the end point (seen under TCG: the press landed
        # at (x2, y2)). Wait until the guest has surely taken the press.
        await asyncio.sleep(CLICK_INTERVAL)
        await self.move(x2, y2)
        await asyncio.sleep(CLICK_INTERVAL)
        await self._button("left", False)

    async def scroll(self, direction: str, amount: int) -> None:
        if direction not in ("up", "down"):
            raise ValueError(f"host-side input scrolls only up or down, not {direction!r}")
        for _ in range(amount):
            await self._button(f"wheel-{direction}", True)
            await self._button(f"wheel-{direction}", False)

    async def type_text(self, text: str) -> None:
        await self.machine.atype_text(text)

    async def press(self, key: str) -> None:
        await self.machine.asend_input(input_events.key_events([key]))

    async def hotkey(self, keys: Sequence[str]) -> None:
        await self.machine.asend_input(input_events.key_events(list(keys)))
