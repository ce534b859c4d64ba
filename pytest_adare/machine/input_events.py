"""QMP ``input-send-event`` payloads: keys as QEMU qcodes (US layout), absolute pointer.

Pure functions; :class:`pytest_adare.qemu.machine.Machine` sends what they build.

Example::

    events = key_events(["ctrl", "alt", "t"])       # press all, release in reverse
    events = text_events("Hi!")                      # shift handled per character
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

ABS_MAX = 32767  # QEMU's absolute pointer range is 0..ABS_MAX on both axes

_UNSHIFTED = {
    " ": "spc", "\n": "ret", "\t": "tab", "-": "minus", "=": "equal", "[": "bracket_left",
    "]": "bracket_right", "\\": "backslash", ";": "semicolon", "'": "apostrophe",
    "`": "grave_accent", ",": "comma", ".": "dot", "/": "slash",
}  # fmt: skip
_SHIFTED = {
    "!": "1", "@": "2", "#": "3", "$": "4", "%": "5", "^": "6", "&": "7", "*": "8",
    "(": "9", ")": "0", "_": "minus", "+": "equal", "{": "bracket_left",
    "}": "bracket_right", "|": "backslash", ":": "semicolon", '"': "apostrophe",
    "~": "grave_accent", "<": "comma", ">": "dot", "?": "slash",
}  # fmt: skip
_KEY_ALIASES = {
    "enter": "ret", "return": "ret", "space": "spc", "escape": "esc", "ctrl": "ctrl",
    "control": "ctrl", "shift": "shift", "alt": "alt", "super": "meta_l", "win": "meta_l",
    "meta": "meta_l", "backspace": "backspace", "delete": "delete", "del": "delete",
    "pageup": "pgup", "pagedown": "pgdn", "capslock": "caps_lock",
}  # fmt: skip
_BUTTONS = ("left", "middle", "right", "wheel-up", "wheel-down")


def char_qcode(char: str) -> tuple[str, bool]:
    """``(qcode, needs_shift)`` for one character typed on a US keyboard.

    :raise ValueError: for characters a US keyboard cannot type.
    """
    if char in string.ascii_lowercase or char in string.digits:
        return char, False
    if char in string.ascii_uppercase:
        return char.lower(), True
    if char in _UNSHIFTED:
        return _UNSHIFTED[char], False
    if char in _SHIFTED:
        return _SHIFTED[char], True
    raise ValueError(f"cannot type {char!r} with a US keyboard layout")


def key_qcode(name: str) -> str:
    """The qcode for a key name such as ``"enter"``, ``"ctrl"``, ``"f5"``, ``"a"``, ``"?"``."""
    lowered = name.lower()
    if lowered in _KEY_ALIASES:
        return _KEY_ALIASES[lowered]
    if len(name) == 1:
        return char_qcode(name)[0]
    if not lowered.replace("_", "").isalnum():
        raise ValueError(f"not a key name: {name!r}")
    return lowered  # already a qcode: f5, tab, up, kp_enter, ...


def _key(qcode: str, down: bool) -> dict[str, Any]:
    return {"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": qcode}}}


def key_events(keys: Sequence[str]) -> list[dict[str, Any]]:
    """Press ``keys`` in order, then release them in reverse (a chord such as ctrl+c)."""
    if not keys:
        raise ValueError("no keys to press")
    codes = [key_qcode(key) for key in keys]
    return [_key(code, True) for code in codes] + [_key(code, False) for code in reversed(codes)]


def text_events(text: str) -> list[list[dict[str, Any]]]:
    """One event batch per character of ``text`` (shift pressed around shifted ones)."""
    batches = []
    for char in text:
        qcode, shift = char_qcode(char)
        batches.append(key_events(["shift", qcode] if shift else [qcode]))
    return batches


def scale_to_abs(value: int, extent: int) -> int:
    """Map a pixel coordinate in ``0..extent-1`` to QEMU's ``0..ABS_MAX`` range."""
    if extent < 1:
        raise ValueError(f"screen extent must be positive, got {extent}")
    if not 0 <= value < extent:
        raise ValueError(f"coordinate {value} outside the screen (0..{extent - 1})")
    return round(value * ABS_MAX / max(extent - 1, 1))


def move_events(x: int, y: int) -> list[dict[str, Any]]:
    """Move the absolute pointer to ``(x, y)`` in ``0..ABS_MAX`` coordinates."""
    for axis, value in (("x", x), ("y", y)):
        if not 0 <= value <= ABS_MAX:
            raise ValueError(f"absolute {axis}={value} outside 0..{ABS_MAX}")
    return [
        {"type": "abs", "data": {"axis": "x", "value": x}},
        {"type": "abs", "data": {"axis": "y", "value": y}},
    ]


def button_events(button: str, down: bool) -> list[dict[str, Any]]:
    """Press or release a pointer button (``left``, ``middle``, ``right``, wheel)."""
    if button not in _BUTTONS:
        raise ValueError(f"unknown button {button!r}; expected one of {', '.join(_BUTTONS)}")
    return [{"type": "btn", "data": {"down": down, "button": button}}]
