"""Waiting on a changing screen: the loop ``wait_for_image`` and ``wait_for_text`` share.

:func:`watch_screen` takes screenshots and runs a (blocking) check on each distinct one
in a worker thread until the check returns something or the time is up. It re-checks
when the screen may have changed: at once after a GUI event of the agent (click, key,
drag; pass ``events=guest.events``), otherwise with a backoff that starts at
:data:`FIRST_DELAY`, restarts whenever the screen moved, and grows to :data:`MAX_DELAY`
while it stays still. An unchanged screen is not checked again. Below both
:mod:`~pytest_adare.screen.match` and :mod:`~pytest_adare.screen.text` (a layer of its own).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from PIL import Image

T = TypeVar("T")
Region = tuple[int, int, int, int]
"""``(x, y, width, height)`` in screen pixels."""
Screenshot = Callable[[], "Awaitable[Image.Image] | Image.Image"]

FIRST_DELAY = 0.05
MAX_DELAY = 1.0
DELAY_GROWTH = 1.6


class OnScreen:
    """What a found thing has in common (``Box``, ``TextMatch``): a box in screen pixels
    and its centre."""

    x: int
    y: int
    width: int
    height: int

    @property
    def center(self) -> tuple[int, int]:
        """The middle of the box, e.g. to click on."""
        return self.x + self.width // 2, self.y + self.height // 2


F = TypeVar("F", bound=OnScreen)


class EventSource(Protocol):
    """Anything with ``subscribe(callback) -> unsubscribe`` (the facade's ``guest.events``)."""

    def subscribe(self, callback: Callable[[Any], Any]) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Watched(Generic[T]):
    """How a wait ended: the check's ``result`` (None: timed out), the last ``screen``
    and how many distinct screens were ``checked``."""

    result: T | None
    screen: Image.Image | None
    checked: int


def check_region(region: Region, size: tuple[int, int]) -> Region:
    """``region`` when it lies inside a screen of ``size`` (width, height).

    :raise ValueError: naming the region and the screen.
    """
    x, y, width, height = region
    if width <= 0 or height <= 0 or x < 0 or y < 0 or x + width > size[0] or y + height > size[1]:
        raise ValueError(
            f"region {region} (x, y, width, height) is not inside the {size[0]}x{size[1]} screen"
        )
    return region


def check_pick(index: int, near: tuple[int, int] | None) -> None:
    """:raise ValueError: ``index`` is not a whole number from 1 on, or ``near`` no point."""
    if type(index) is not int or index < 1:
        raise ValueError(f"index counts matches from 1, got {index!r}")
    if near is not None and (
        len(near) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in near)
    ):
        raise ValueError(f"near must be an (x, y) pair of ints, got {near!r}")


def pick(found: Sequence[F], index: int = 1, near: tuple[int, int] | None = None) -> F | None:
    """The ``index``-th (from 1) of ``found`` (in reading order), or with ``near`` the
    ``index``-th closest to that point (by the centres); None when there are fewer."""
    check_pick(index, near)
    if near is not None:
        x, y = near
        found = sorted(found, key=lambda f: (f.center[0] - x) ** 2 + (f.center[1] - y) ** 2)
    return found[index - 1] if len(found) >= index else None


def save_screenshot(screen: Image.Image | None, prefix: str) -> Path | None:
    """``screen`` saved as a temporary PNG (for a timeout's message), or None."""
    if screen is None:
        return None
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".png")
    os.close(handle)
    screen.save(name)
    return Path(name)


async def watch_screen(
    screenshot_fn: Screenshot,
    check: Callable[[Image.Image], T | None],
    timeout: float,
    events: EventSource | None = None,
) -> Watched[T]:
    """Run ``check`` (in a thread) on each distinct screen until it returns a result or
    ``timeout`` seconds pass; see the module docstring for when screens are taken."""
    screen_changed = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_event(event: Any) -> None:
        kind = getattr(event, "event_type", "")
        if str(getattr(kind, "value", kind)).startswith("gui_"):
            loop.call_soon_threadsafe(screen_changed.set)

    unsubscribe = events.subscribe(on_event) if events is not None else None
    try:
        return await _watch(screenshot_fn, check, timeout, screen_changed)
    finally:
        if unsubscribe is not None:
            unsubscribe()


async def _watch(
    screenshot_fn: Screenshot,
    check: Callable[[Image.Image], T | None],
    timeout: float,
    screen_changed: asyncio.Event,
) -> Watched[T]:
    deadline = time.monotonic() + timeout
    delay, last_digest, checked = FIRST_DELAY, b"", 0
    screen: Image.Image | None = None
    while True:
        screen_changed.clear()
        taken = screenshot_fn()
        screen = await taken if inspect.isawaitable(taken) else taken
        digest = hashlib.blake2b(screen.tobytes(), digest_size=16).digest()
        if digest != last_digest:  # an unchanged screen gives the same answer
            checked += 1
            result = await asyncio.to_thread(check, screen)
            if result is not None:
                return Watched(result, screen, checked)
            delay, last_digest = FIRST_DELAY, digest
        else:
            delay = min(delay * DELAY_GROWTH, MAX_DELAY)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Watched(None, screen, checked)
        try:
            await asyncio.wait_for(screen_changed.wait(), min(delay, remaining))
        except asyncio.TimeoutError:
            pass
