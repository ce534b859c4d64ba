"""Moved to :mod:`pytest_adare.screen.wait`; this module path stays for the imports
that name it (docs, users' tests)."""

from pytest_adare.screen.wait import (
    DELAY_GROWTH,
    FIRST_DELAY,
    MAX_DELAY,
    EventSource,
    OnScreen,
    Region,
    Screenshot,
    Watched,
    check_pick,
    check_region,
    pick,
    save_screenshot,
    watch_screen,
)

__all__ = [
    "DELAY_GROWTH",
    "FIRST_DELAY",
    "MAX_DELAY",
    "EventSource",
    "OnScreen",
    "Region",
    "Screenshot",
    "Watched",
    "check_pick",
    "check_region",
    "pick",
    "save_screenshot",
    "watch_screen",
]
