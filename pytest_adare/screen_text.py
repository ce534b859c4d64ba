"""Moved to :mod:`pytest_adare.screen.text`; this module path stays for the imports
that name it (docs, users' tests)."""

from pytest_adare.screen.text import (
    OcrLine,
    OcrUnavailable,
    OcrWord,
    TextMatch,
    TextNotFound,
    TextQuery,
    TextStillShown,
    TextWaitTimeout,
    find_in_lines,
    find_text,
    lines_text,
    merge_lines,
    read_lines,
    read_screen_text,
    wait_for_text,
    wait_for_text_gone,
)

__all__ = [
    "OcrLine",
    "OcrUnavailable",
    "OcrWord",
    "TextMatch",
    "TextNotFound",
    "TextQuery",
    "TextStillShown",
    "TextWaitTimeout",
    "find_in_lines",
    "find_text",
    "lines_text",
    "merge_lines",
    "read_lines",
    "read_screen_text",
    "wait_for_text",
    "wait_for_text_gone",
]
