"""Keys, text and pointer moves as QMP input-send-event payloads."""

from __future__ import annotations

import pytest

from pytest_adare.machine.input_events import (
    ABS_MAX,
    button_events,
    char_qcode,
    key_events,
    move_events,
    scale_to_abs,
    text_events,
)


def _keys(events: list[dict[str, object]]) -> list[tuple[str, bool]]:
    return [(e["data"]["key"]["data"], e["data"]["down"]) for e in events]  # type: ignore[index]


def test_a_chord_presses_in_order_and_releases_in_reverse() -> None:
    assert _keys(key_events(["ctrl", "alt", "Delete"])) == [
        ("ctrl", True), ("alt", True), ("delete", True),
        ("delete", False), ("alt", False), ("ctrl", False),
    ]  # fmt: skip


def test_text_uses_shift_for_capitals_and_shifted_symbols() -> None:
    batches = [_keys(batch) for batch in text_events("aB!\n")]
    assert batches == [
        [("a", True), ("a", False)],
        [("shift", True), ("b", True), ("b", False), ("shift", False)],
        [("shift", True), ("1", True), ("1", False), ("shift", False)],
        [("ret", True), ("ret", False)],
    ]


@pytest.mark.parametrize(
    ("char", "expected"),
    [(" ", ("spc", False)), ("/", ("slash", False)), ("?", ("slash", True)),
     ("~", ("grave_accent", True)), ("7", ("7", False))],
)  # fmt: skip
def test_characters_map_to_us_layout_qcodes(char: str, expected: tuple[str, bool]) -> None:
    assert char_qcode(char) == expected


def test_characters_a_us_keyboard_cannot_type_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot type"):
        char_qcode("é")


def test_pixels_scale_to_the_absolute_range_corner_to_corner() -> None:
    assert scale_to_abs(0, 1024) == 0
    assert scale_to_abs(1023, 1024) == ABS_MAX
    assert scale_to_abs(512, 1025) == ABS_MAX // 2 + 1
    with pytest.raises(ValueError, match="outside the screen"):
        scale_to_abs(1024, 1024)


def test_moves_are_absolute_and_bounded() -> None:
    assert move_events(0, ABS_MAX) == [
        {"type": "abs", "data": {"axis": "x", "value": 0}},
        {"type": "abs", "data": {"axis": "y", "value": ABS_MAX}},
    ]
    with pytest.raises(ValueError, match="outside"):
        move_events(-1, 0)


def test_buttons_are_checked_by_name() -> None:
    assert button_events("right", True) == [
        {"type": "btn", "data": {"down": True, "button": "right"}}
    ]
    with pytest.raises(ValueError, match="unknown button"):
        button_events("fourth", True)
