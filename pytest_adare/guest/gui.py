"""The facade's GUI: screenshots, pointer and keyboard through the guest's
:class:`~pytest_adare.guest.core.Screen`, and what shows on it (images, OCR text,
windows) read or waited for."""

from __future__ import annotations

import asyncio
import re
from typing import Literal, overload

from PIL import Image

from adare_guest.tool_names import LIST_WINDOWS
from pytest_adare.guest.core import GuestCore
from pytest_adare.guest_waits import DEFAULT_WAIT, Window, poll_until, windows_from_result
from pytest_adare.screen.match import (
    Box,
    Region,
    Template,
    matcher_for,
    wait_for_image,
    wait_for_image_gone,
)
from pytest_adare.screen.text import (
    Pattern,
    TextMatch,
    TextQuery,
    find_text,
    read_screen_text,
    wait_for_text,
    wait_for_text_gone,
)

MouseButton = Literal["left", "right", "middle"]


class AsyncKeyboard:
    """``guest.aio.keyboard``: ``type`` text, ``press`` one key, ``hotkey`` a chord."""

    def __init__(self, guest: GuestCore) -> None:
        self._guest = guest

    async def type(self, text: str) -> None:
        """Type ``text`` as keystrokes."""
        await self._guest.on_home_loop(self._guest.screen.type_text(text))

    async def press(self, key: str) -> None:
        """Press and release one key, e.g. ``"enter"``."""
        await self._guest.on_home_loop(self._guest.screen.press(key))

    async def hotkey(self, *keys: str) -> None:
        """Press ``keys`` together, e.g. ``hotkey("ctrl", "c")``."""
        if not keys:
            raise ValueError("hotkey() needs at least one key")
        await self._guest.on_home_loop(self._guest.screen.hotkey(keys))


class GuestGui(GuestCore):
    """The guest's screen: screenshots, the pointer, and images, text and windows on it."""

    async def screenshot(self) -> Image.Image:
        """The guest's screen as a PIL image (agent, or QMP screendump with ``gui="host"``)."""
        return await self.on_home_loop(self.screen.screenshot())

    async def click(self, x: int, y: int) -> None:
        """Left click at screen pixel (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "left", 1))

    async def double_click(self, x: int, y: int) -> None:
        """Double click at (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "left", 2))

    async def right_click(self, x: int, y: int) -> None:
        """Right click at (x, y)."""
        await self.on_home_loop(self.screen.click(x, y, "right", 1))

    async def goto(self, x: int, y: int) -> None:
        """Move the pointer to (x, y)."""
        await self.on_home_loop(self.screen.move(x, y))

    async def drag(self, x1: int, y1: int, x2: int, y2: int) -> None:
        """Press at (x1, y1), move to (x2, y2), release."""
        await self.on_home_loop(self.screen.drag(x1, y1, x2, y2))

    async def scroll(self, direction: str = "down", amount: int = 3) -> None:
        """Scroll ``amount`` steps ``up``, ``down``, ``left`` or ``right``."""
        if direction not in ("up", "down", "left", "right"):
            raise ValueError(f"scroll direction must be up/down/left/right, got {direction!r}")
        await self.on_home_loop(self.screen.scroll(direction, amount))

    @overload
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = ...,
        region: Region | None = ...,
        threshold: float | None = ...,
        *,
        gone: Literal[False] = ...,
        index: int = ...,
        near: tuple[int, int] | None = ...,
    ) -> Box: ...
    @overload
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = ...,
        region: Region | None = ...,
        threshold: float | None = ...,
        *,
        gone: Literal[True],
        index: int = ...,
        near: tuple[int, int] | None = ...,
    ) -> None: ...
    async def wait_for_image(
        self,
        template: Template,
        timeout: float = 10.0,
        region: Region | None = None,
        threshold: float | None = None,
        *,
        gone: bool = False,
        index: int = 1,
        near: tuple[int, int] | None = None,
    ) -> Box | None:
        """Take screenshots until ``template`` shows; its :class:`Box` on the screen.

        ``template``: an image, a PNG path (with its needle sidecar, if any) or a
        :class:`~pytest_adare.screen.match.Needle`; ``threshold`` defaults to the
        needle's, else 0.9. GUI events of the agent wake the matcher early (see
        :mod:`pytest_adare.screen.match`). ``index`` picks the n-th match in reading
        order, ``near=(x, y)`` the closest one; ``gone=True`` waits until the template
        is no longer on the screen (returns None).

        :raise ImageNotFound: after ``timeout`` s, naming the best score and a saved screenshot.
        :raise ImageStillShown: with ``gone=True``, it was still there after ``timeout`` s.
        """
        if gone:
            await wait_for_image_gone(
                self.screenshot, template, timeout, region, threshold, events=self.events
            )
            return None
        return await wait_for_image(
            self.screenshot, template, timeout, region, threshold, events=self.events,
            index=index, near=near,
        )  # fmt: skip

    async def click_image(
        self,
        template: Template,
        timeout: float = 10.0,
        region: Region | None = None,
        threshold: float | None = None,
        *,
        button: MouseButton = "left",
        clicks: int = 1,
        index: int = 1,
        near: tuple[int, int] | None = None,
    ) -> Box:
        """Wait for ``template`` like :meth:`wait_for_image`, then click it (its centre, or
        the needle's click point) with ``button``, ``clicks`` times (2: a double click);
        returns where it was found."""
        check_click(button, clicks)
        matcher = matcher_for(template)
        box = await self.wait_for_image(matcher, timeout, region, threshold, index=index, near=near)
        dx, dy = matcher.click_offset
        await self.on_home_loop(self.screen.click(box.x + dx, box.y + dy, button, clicks))
        return box

    async def screen_text(self, region: Region | None = None) -> str:
        """The text read on the screen (or in ``region`` = x, y, width, height) by OCR on
        the host (see :mod:`pytest_adare.screen.text`).

        :raise OcrUnavailable: tesserocr or tesseract's English data is missing.
        """
        return await asyncio.to_thread(read_screen_text, await self.screenshot(), region)

    async def find_text(
        self,
        pattern: Pattern,
        region: Region | None = None,
        *,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> list[TextMatch]:
        """Every place ``pattern`` (literal text or a compiled regex) is read on the
        screen now, in reading order (top to bottom, then left to right), each with its
        box and confidence; empty when nowhere. ``max_distance`` allows that many
        edits in literal text (OCR misreads)."""
        query = TextQuery(pattern, ignore_case, max_distance)
        return await asyncio.to_thread(find_text, query, await self.screenshot(), region)

    @overload
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = ...,
        region: Region | None = ...,
        *,
        gone: Literal[False] = ...,
        index: int = ...,
        near: tuple[int, int] | None = ...,
        ignore_case: bool = ...,
        max_distance: int = ...,
    ) -> TextMatch: ...
    @overload
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = ...,
        region: Region | None = ...,
        *,
        gone: Literal[True],
        index: int = ...,
        near: tuple[int, int] | None = ...,
        ignore_case: bool = ...,
        max_distance: int = ...,
    ) -> None: ...
    async def wait_for_text(
        self,
        pattern: Pattern,
        timeout: float = 10.0,
        region: Region | None = None,
        *,
        gone: bool = False,
        index: int = 1,
        near: tuple[int, int] | None = None,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> TextMatch | None:
        """Read the screen until ``pattern`` shows (re-read when the screen changes,
        woken early by the agent's GUI events); the first match in reading order, the
        ``index``-th, or the one closest to ``near=(x, y)``. ``gone=True`` waits until
        it is read nowhere (returns None).

        :raise TextNotFound: after ``timeout`` s, with the last screenshot and its text.
        :raise TextStillShown: with ``gone=True``, it was still there after ``timeout`` s.
        """
        query = TextQuery(pattern, ignore_case, max_distance)
        if gone:
            await wait_for_text_gone(self.screenshot, query, timeout, region, self.events)
            return None
        return await wait_for_text(
            self.screenshot, query, timeout, region, self.events, index=index, near=near
        )

    async def click_text(
        self,
        pattern: Pattern,
        timeout: float = 10.0,
        region: Region | None = None,
        *,
        button: MouseButton = "left",
        clicks: int = 1,
        index: int = 1,
        near: tuple[int, int] | None = None,
        ignore_case: bool = False,
        max_distance: int = 0,
    ) -> TextMatch:
        """Wait for ``pattern`` like :meth:`wait_for_text`, then click the centre of the
        matched text with ``button`` (``left``, ``right``, ``middle``), ``clicks`` times
        (2: a double click); returns the match."""
        check_click(button, clicks)
        match = await self.wait_for_text(
            pattern, timeout, region, index=index, near=near, ignore_case=ignore_case,
            max_distance=max_distance,
        )  # fmt: skip
        await self.on_home_loop(self.screen.click(*match.center, button, clicks))
        return match

    async def wait_for_window(
        self, title: str | re.Pattern[str], timeout: float = DEFAULT_WAIT
    ) -> Window:
        """Wait until a visible window's title matches ``title`` (a regex, ``search``
        semantics; a ``str`` is compiled as one); the first such window, with its title
        and geometry. Needs the agent's desktop tools (python-xlib or xdotool in the guest).

        :raise GuestWaitTimeout: after ``timeout`` s, listing the titles last seen.
        :raise ToolError: the guest has no desktop the agent can reach.
        """
        regex = re.compile(title) if isinstance(title, str) else title

        async def listed(budget: float) -> list[Window]:
            return windows_from_result(await self._checked(LIST_WINDOWS))

        windows = await poll_until(
            listed, lambda found: any(regex.search(w.title) for w in found), timeout,
            f"a window titled {regex.pattern!r}",
            lambda found: "titles " + (", ".join(repr(w.title) for w in found[:20]) or "none"),
        )  # fmt: skip
        return next(w for w in windows if regex.search(w.title))


def check_click(button: str, clicks: int) -> None:
    """:raise ValueError: not a mouse button, or not 1..3 clicks."""
    if button not in ("left", "right", "middle"):
        raise ValueError(f"button must be 'left', 'right' or 'middle', got {button!r}")
    if type(clicks) is not int or not 1 <= clicks <= 3:
        raise ValueError(f"clicks must be 1, 2 or 3, got {clicks!r}")
