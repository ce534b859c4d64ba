"""Choosing among matches: fuzzy and case-blind text, the n-th or nearest match, every
place a template shows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from pytest_adare.screen.match import TemplateMatcher
from pytest_adare.screen.text import OcrLine, OcrWord, TextQuery, find_in_lines, fuzzy_spans
from pytest_adare.screen.wait import pick


def line(text: str, x: int, y: int) -> OcrLine:
    words, left = [], x
    for word in text.split():
        words.append(OcrWord(word, left, y, 10 * len(word), 20, 90.0))
        left += 10 * len(word) + 10
    return OcrLine("raw", tuple(words))


def test_fuzzy_spans_find_a_misread_word_by_its_edits() -> None:
    assert fuzzy_spans("Trash", "Move to Tr4sh now", 1) == [(8, 13, 1)]
    assert fuzzy_spans("Trash", "Move to Trsh now", 1) == [(8, 12, 1)]  # a dropped letter
    assert fuzzy_spans("Trash", "Move to Tr4sh now", 0) == []
    assert fuzzy_spans("trash", "TRASH", 0, ignore_case=True) == [(0, 5, 0)]
    assert fuzzy_spans("OK", "OK  0K", 1) == [(0, 2, 0), (4, 6, 1)]


def test_the_exact_reading_wins_over_a_fuzzy_one_at_the_same_place() -> None:
    lines = [line("Delete file", 0, 0), line("Delate file", 0, 100)]
    exact, fuzzy = find_in_lines(TextQuery("Delete", max_distance=1), lines)
    assert (exact.text, exact.distance, exact.y) == ("Delete", 0, 0)
    assert (fuzzy.text, fuzzy.distance, fuzzy.y) == ("Delate", 1, 100)


def test_ignore_case_works_on_text_and_on_a_regex() -> None:
    lines = [line("Empty TRASH", 0, 0)]
    assert find_in_lines("trash", lines) == []
    assert [m.text for m in find_in_lines(TextQuery("trash", ignore_case=True), lines)] == ["TRASH"]
    regex = TextQuery(re.compile("t.ash"), ignore_case=True)
    assert [m.text for m in find_in_lines(regex, lines)] == ["TRASH"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (lambda: TextQuery("OK", max_distance=2), "would match any text"),
        (lambda: TextQuery(re.compile("OK"), max_distance=1), "literal text, not on a regex"),
        (lambda: TextQuery("OK", max_distance=-1), "max_distance must be an int >= 0"),
        (lambda: TextQuery("  "), "non-empty string or a regex"),
    ],
)
def test_a_query_that_cannot_work_is_refused(query: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        query()  # type: ignore[operator]


def test_pick_takes_the_nth_in_reading_order_or_the_nearest() -> None:
    matches = find_in_lines("OK", [line("OK OK", 0, 0), line("OK", 0, 100)])
    assert [(m.x, m.y) for m in matches] == [(0, 0), (30, 0), (0, 100)]
    assert pick(matches, 2) == matches[1]
    assert pick(matches, 4) is None
    assert pick(matches, near=(5, 95)) == matches[2]
    assert pick(matches, 2, near=(5, 95)) == matches[0]  # the second closest
    with pytest.raises(ValueError, match="index counts matches from 1"):
        pick(matches, 0)
    with pytest.raises(ValueError, match="near must be an"):
        pick(matches, near=(1.5, 2))  # type: ignore[arg-type]


def test_template_all_finds_every_copy_once_in_reading_order() -> None:
    rng = np.random.default_rng(7)
    icon = (rng.random((12, 16)) * 255).astype(np.uint8)
    screen = np.full((200, 300), 128, np.uint8)
    places = [(150, 20), (10, 20), (40, 120)]  # (x, y); two share a row
    for x, y in places:
        screen[y : y + 12, x : x + 16] = icon
    matcher = TemplateMatcher(Image.fromarray(icon))
    found = matcher.all(Image.fromarray(screen))
    assert [(b.x, b.y) for b in found] == [(10, 20), (150, 20), (40, 120)]
    assert all(b.score > 0.99 for b in found)
    lower_half = matcher.all(Image.fromarray(screen), region=(0, 100, 300, 100))
    assert [(b.x, b.y) for b in lower_half] == [(40, 120)]
