"""The console capture moved to :mod:`pytest_adare.machine.console` (every backend shares it)."""

from pytest_adare.machine.console import (
    FATAL_LINE,
    MAX_FATAL_EXCERPTS,
    MAX_LINE_CHARS,
    MAX_LOG_BYTES,
    RING_LINES,
    ConsoleCapture,
)

__all__ = [
    "FATAL_LINE",
    "MAX_FATAL_EXCERPTS",
    "MAX_LINE_CHARS",
    "MAX_LOG_BYTES",
    "RING_LINES",
    "ConsoleCapture",
]
