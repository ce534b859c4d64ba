"""Screen text: matching and merging over recorded OCR output, and tesseract for real.

``data/ocr/dialog.json`` is what :func:`read_lines` returned (every variant's lines) for
a screenshot of the desktop image's demo dialog (message, clock, OK and Cancel).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from pytest_adare.screen import text as screen_text
from pytest_adare.screen.text import (
    OcrLine,
    OcrUnavailable,
    OcrWord,
    TextMatch,
    TextNotFound,
    find_in_lines,
    find_text,
    lines_text,
    merge_lines,
    read_screen_text,
    wait_for_text,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "ocr"


def recorded(name: str) -> list[OcrLine]:
    raw = json.loads((DATA / name).read_text())
    return [OcrLine(line["variant"], tuple(OcrWord(**w) for w in line["words"])) for line in raw]


@pytest.fixture
def dialog() -> list[OcrLine]:
    return recorded("dialog.json")


def test_the_recording_holds_several_variants_reading_the_same_words(
    dialog: list[OcrLine],
) -> None:
    assert {line.variant for line in dialog} >= {"raw", "inverted", "grey", "scaled"}
    assert sum(line.text == "OK" for line in dialog) >= 3


def test_every_variant_reading_one_place_merges_into_one_match(dialog: list[OcrLine]) -> None:
    [ok] = find_in_lines("OK", dialog)
    assert (ok.text, ok.line) == ("OK", "OK")
    assert 0.9 < ok.confidence <= 1
    assert 75 <= ok.x <= 80 and 130 <= ok.y <= 140 and 30 <= ok.width <= 40
    assert ok.center == (ok.x + ok.width // 2, ok.y + ok.height // 2)


def test_a_match_inside_a_line_is_boxed_to_its_own_characters(dialog: list[OcrLine]) -> None:
    [whole] = find_in_lines("Save the changes?", dialog)
    [part] = find_in_lines("the changes", dialog)
    assert part.line == "Save the changes?"
    the = next(w for line in dialog for w in line.words if w.text == "the")
    assert part.x == the.x  # starts where "the" starts, not where the line does
    assert whole.x < part.x and part.x + part.width < whole.x + whole.width  # "?" left out


def test_literal_text_is_not_a_regex_and_a_compiled_regex_is(dialog: list[OcrLine]) -> None:
    assert find_in_lines("12.13", dialog) == []  # the dot is a dot
    [clock] = find_in_lines(re.compile(r"\d\d:\d\d:\d\d"), dialog)
    assert clock.text == "12:13:31"
    [cancel] = find_in_lines(re.compile("cancel", re.IGNORECASE), dialog)
    assert cancel.text == "Cancel" and cancel.x > clock.x


def test_matches_come_in_reading_order(dialog: list[OcrLine]) -> None:
    found = find_in_lines(re.compile(r"[A-Z]\w+"), dialog)
    assert [m.text for m in found] == ["Save", "OK", "Cancel"]


def test_absent_text_finds_nothing_and_an_empty_pattern_is_refused(
    dialog: list[OcrLine],
) -> None:
    assert find_in_lines("Saved", dialog) == []
    with pytest.raises(ValueError, match="non-empty"):
        find_in_lines("  ", dialog)


def test_merged_text_has_one_reading_per_place_in_rows(dialog: list[OcrLine]) -> None:
    assert lines_text(merge_lines(dialog)) == "Save the changes?\n12:13:31\nOK  Cancel"


def word(text: str, x: int, y: int, confidence: float = 90.0) -> OcrWord:
    return OcrWord(text, x, y, 10 * len(text), 16, confidence)


def test_a_line_one_variant_split_loses_to_the_whole_line_of_another() -> None:
    whole = OcrLine("raw", (word("File", 0, 0), word("saved", 50, 0)))
    split = [OcrLine("scaled", (word("File", 0, 0),)), OcrLine("scaled", (word("saved", 50, 0),))]
    assert merge_lines([*split, whole]) == [whole]
    assert lines_text(merge_lines([*split, whole])) == "File saved"


def test_the_more_confident_reading_of_a_place_wins() -> None:
    weak = OcrLine("raw", (word("0K", 0, 0, 45.0),))
    strong = OcrLine("inverted", (word("OK", 1, 1, 95.0),))
    assert merge_lines([weak, strong]) == [strong]
    [match] = find_in_lines(re.compile("[0O]K"), [weak, strong])
    assert match.text == "OK" and match.confidence == pytest.approx(0.95)


# -- tesseract for real ----------------------------------------------------------------------


FONT = ImageFont.load_default(size=28)


def rendered(lines: list[str], *, dark: bool, size: tuple[int, int] = (640, 200)) -> Image.Image:
    """Text drawn with Pillow's own font: dark on light, or light on dark (a terminal);
    line ``i`` starts at (30, 30 + 60 i)."""
    image = Image.new("RGB", size, (16, 16, 16) if dark else (235, 235, 235))
    draw = ImageDraw.Draw(image)
    for index, text in enumerate(lines):
        draw.text((30, 30 + 60 * index), text, font=FONT, fill=(220, 220, 220) if dark else "black")
    return image


@pytest.mark.parametrize("dark", [False, True], ids=["dialog-like", "terminal-like"])
def test_tesseract_reads_dark_on_light_and_light_on_dark(dark: bool) -> None:
    screen = rendered(["Install finished", "user@host:~$ echo MARKER42"], dark=dark)
    assert "Install finished" in read_screen_text(screen)
    [marker] = find_text("MARKER42", screen)
    left = 30 + FONT.getlength("user@host:~$ echo ")
    assert abs(marker.x - left) <= 6 and abs(marker.width - FONT.getlength("MARKER42")) <= 8
    assert 90 <= marker.y <= 110 and marker.confidence > 0.5


def test_a_region_is_read_alone_and_boxes_stay_in_screen_pixels() -> None:
    screen = rendered(["left words", "MARKER77 here"], dark=False)
    everywhere = find_text("MARKER77", screen)
    assert len(everywhere) == 1
    inside = find_text("MARKER77", screen, region=(0, 70, 640, 80))
    assert [(m.x, m.y) for m in inside] == [(everywhere[0].x, everywhere[0].y)]
    assert find_text("left", screen, region=(0, 70, 640, 80)) == []
    with pytest.raises(ValueError, match="not inside"):
        find_text("x", screen, region=(600, 0, 100, 10))


def screens(*images: Image.Image) -> Iterator[Image.Image]:
    """The screen over time: each image once, then the last one forever."""
    yield from images
    while True:
        yield images[-1]


def test_wait_for_text_returns_once_the_text_shows() -> None:
    shown = screens(rendered(["Working"], dark=True), rendered(["Done: 3 files"], dark=True))
    match = asyncio.run(wait_for_text(lambda: next(shown), re.compile(r"Done: \d+"), timeout=30))
    assert isinstance(match, TextMatch) and match.text == "Done: 3"


def test_wait_for_text_times_out_with_the_screenshot_and_the_text_it_read() -> None:
    screen = rendered(["Please wait"], dark=False)
    with pytest.raises(TextNotFound) as raised:
        asyncio.run(wait_for_text(lambda: screen, "Finished", timeout=1.0))
    error = raised.value
    assert isinstance(error, TimeoutError)
    assert "text 'Finished' not read on screen within 1.0 s" in str(error)
    assert "Please wait" in error.text and "Please wait" in str(error)
    assert error.screenshot is screen and error.screenshot_path is not None
    with Image.open(error.screenshot_path) as saved:
        assert saved.size == screen.size
    error.screenshot_path.unlink()


@pytest.fixture
def fresh_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(screen_text, "_engines", [])


@pytest.mark.usefixtures("fresh_engine")
def test_without_tesserocr_the_error_names_the_extra_and_the_apt_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tesserocr", None)  # as if not installed
    with pytest.raises(OcrUnavailable) as raised:
        read_screen_text(rendered(["x"], dark=False))
    assert "pip install 'pytest-adare[ocr]'" in str(raised.value)
    assert "tesseract-ocr-eng" in str(raised.value)


@pytest.mark.usefixtures("fresh_engine")
def test_without_english_data_the_error_names_the_apt_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    monkeypatch.setattr(screen_text, "TESSDATA_DIRS", ())
    with pytest.raises(OcrUnavailable, match=r"apt-get install tesseract-ocr tesseract-ocr-eng"):
        read_screen_text(rendered(["x"], dark=False))


def test_large_screens_get_a_smaller_scaled_variant_and_huge_ones_are_refused() -> None:
    assert screen_text.scale_for((1024, 768)) == 3
    assert screen_text.scale_for((3840, 2160)) == 1  # 4K: read at its own size only
    assert [name for name, _, _ in screen_text.variant_images(Image.new("L", (3840, 2160)))] == [
        "raw",
        "inverted",
        "grey",
    ]
    with pytest.raises(ValueError, match="too large to read"):
        read_screen_text(Image.new("L", (10_000, 5_000)))


def test_the_banded_variant_only_fills_places_the_others_did_not_read() -> None:
    plain = OcrLine("scaled", (word("Please", 0, 0, 60.0), word("wait", 70, 0, 60.0)))
    banded_there = OcrLine("banded", (word("wait", 70, 0, 96.0),))
    banded_elsewhere = OcrLine("banded", (word("BRAVO", 0, 40, 80.0),))
    merged = merge_lines([banded_there, plain, banded_elsewhere])
    assert merged == [plain, banded_elsewhere]
    assert lines_text(merged) == "Please wait\nBRAVO"


@pytest.mark.parametrize(
    ("screenshot", "digits"),
    [
        # The selection's first stem was cut off its band, so OCR read no BRAVO.
        ("xterm-reverse-video.png", "2336"),
        # Each '5' kept the square corners of an 'S' after the scaling: 'BRAVO S424'.
        ("xterm-reverse-video-digit-5.png", "5424"),
    ],
)
def test_an_xterm_selection_that_starts_at_its_first_letter_reads(
    screenshot: str, digits: str
) -> None:
    # Real screenshots of the built-in desktop (xterm's 6x13 font, SGR 7 on the middle
    # line), each a screen OCR once misread.
    screen = Image.open(DATA / screenshot)
    for line in (f"ALPHA {digits}", f"BRAVO {digits}", f"CHARLIE {digits}"):
        assert [match.text for match in find_text(line, screen)] == [line]


def test_a_selection_at_a_dark_areas_edge_is_still_a_dark_band() -> None:
    # The same desktop in a CI run: the dark area judged over 40 px around the black root
    # window reached 4 px into the terminal, over the selection's first letter, and that
    # strip was inverted by neither rule ('BRAVO' read as 'RRAVO').
    screen = Image.open(DATA / "xterm-reverse-video-edge.png")
    for line in ("ALPHA 5346", "BRAVO 5346", "CHARLIE 5346"):
        assert [match.text for match in find_text(line, screen)] == [line]
