"""Read text on the guest's screen: tesseract OCR on the host, matching over word boxes.

::

    text = guest.screen_text()                            # every line read, top to bottom
    [match] = guest.find_text("Save the changes?")        # TextMatch(text, x, y, ..., confidence)
    match = guest.wait_for_text(re.compile(r"saved \\d+ files"), timeout=30)
    guest.click(*match.center)                            # or guest.click_text("OK")

The OCR runs on the host (no work in the guest) through ``tesserocr`` (the ``ocr``
extra; why not ``pytesseract``: docs/gui.md) on several variants of one screenshot:
the raw image, grey levels, inverted grey (light-on-dark terminals), and grey as dark
on light scaled up three times (small bitmap fonts: xterm's, the VGA console's).
Tesseract reads each in sparse-text mode (a screen is
labels and buttons scattered over a page, not a column of prose); the word boxes of
all variants are then matched and merged by the pure functions below, which the unit
tests run on recorded OCR output:

- :func:`find_in_lines` matches a pattern (literal text or a compiled regex) within
  each line of each variant and narrows the box to the matched characters; matches
  of several variants at one place merge into the most confident one.
- :func:`merge_lines` keeps, where variants read the same place, the most
  confident reading; :func:`lines_text` lays the kept lines out as text.

:func:`wait_for_text` re-reads the screen when it may have changed (as
:func:`~pytest_adare.screen_wait.watch_screen` says), stops at the first variant
that matches, and on timeout raises :class:`TextNotFound` with the last screenshot
(saved as a PNG) and the text read from it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union

from PIL import Image, ImageOps

from pytest_adare.errors import AdareError
from pytest_adare.screen_wait import (
    EventSource,
    OnScreen,
    Region,
    Screenshot,
    Watched,
    check_region,
    save_screenshot,
    watch_screen,
)

__all__ = [
    "OcrLine",
    "OcrUnavailable",
    "OcrWord",
    "TextMatch",
    "TextNotFound",
    "find_in_lines",
    "find_text",
    "lines_text",
    "merge_lines",
    "read_lines",
    "read_screen_text",
    "wait_for_text",
]

T = TypeVar("T")
Pattern = Union[str, "re.Pattern[str]"]
OCR_EXTRA_HINT = "pip install 'pytest-adare[ocr]'"
OCR_APT_HINT = "apt-get install tesseract-ocr tesseract-ocr-eng"
TESSDATA_DIRS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
    "/opt/homebrew/share/tessdata",
)
"""Where tesseract's language data is looked for when ``$TESSDATA_PREFIX`` is unset."""
VARIANTS = ("raw", "inverted", "scaled", "grey")
"""The order variants are read in (a wait stops at the first that matches)."""
MIN_WORD_CONFIDENCE = 40.0
"""Words tesseract is less sure of (0-100) are noise on a screen: left out."""
SCALE = 3
MAX_SCALED_PIXELS = 12_000_000
"""The scaled variant stays below this (a 4K screen is read at its own size only)."""
MAX_SCREEN_PIXELS = 40_000_000
"""Screens larger than this (the guest sends the screenshot) are refused, not read."""
SAME_PLACE = 0.5
"""Two boxes are one place when their overlap covers this share of the smaller one."""
MAX_TEXT_IN_ERROR = 2000


class OcrUnavailable(AdareError):
    """Tesseract or its English data is missing; the message names what to install."""


@dataclass(frozen=True)
class OcrWord:
    """One word tesseract read: its box in screen pixels and its confidence (0-100)."""

    text: str
    x: int
    y: int
    width: int
    height: int
    confidence: float


@dataclass(frozen=True)
class OcrLine:
    """One text line of one variant: its words left to right."""

    variant: str
    words: tuple[OcrWord, ...]

    @property
    def text(self) -> str:
        return " ".join(word.text for word in self.words)

    @property
    def box(self) -> Region:
        return _union([(w.x, w.y, w.width, w.height) for w in self.words])

    @property
    def confidence(self) -> float:
        return sum(w.confidence for w in self.words) / len(self.words) if self.words else 0.0


@dataclass(frozen=True)
class TextMatch(OnScreen):
    """Where a pattern was read: the matched ``text``, its box on the screen, and the
    ``confidence`` (0-1) of the least sure word in it."""

    text: str
    x: int
    y: int
    width: int
    height: int
    confidence: float
    line: str
    """The whole line the match was found in."""

    @property
    def box(self) -> Region:
        return self.x, self.y, self.width, self.height


class TextNotFound(AdareError, TimeoutError):
    """The text did not show within the timeout.

    ``screenshot`` / ``screenshot_path`` hold the last screen, ``text`` what was read on it.
    """

    def __init__(
        self,
        message: str,
        screenshot: Image.Image | None,
        screenshot_path: Path | None,
        text: str,
    ) -> None:
        self.screenshot = screenshot
        self.screenshot_path = screenshot_path
        self.text = text
        super().__init__(message)


# -- pure matching and merging over OCR output ---------------------------------------------


def _union(boxes: Sequence[Region]) -> Region:
    left = min(b[0] for b in boxes)
    top = min(b[1] for b in boxes)
    right = max(b[0] + b[2] for b in boxes)
    bottom = max(b[1] + b[3] for b in boxes)
    return left, top, right - left, bottom - top


def same_place(a: Region, b: Region) -> bool:
    """Whether two boxes cover one place: their overlap is most of the smaller one."""
    width = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    height = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return False
    smaller = min(a[2] * a[3], b[2] * b[3])
    return smaller > 0 and width * height >= SAME_PLACE * smaller


def _compile(pattern: Pattern) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"the text to find must be a non-empty string or a regex, got {pattern!r}")
    return re.compile(re.escape(pattern))


def describe_pattern(pattern: Pattern) -> str:
    """``'OK'`` or ``re.compile('saved \\d+')`` for messages."""
    return repr(pattern) if isinstance(pattern, str) else f"re.compile({pattern.pattern!r})"


def _match_in_line(line: OcrLine, start: int, end: int, text: str) -> TextMatch:
    """The box of characters ``start:end`` of ``line.text``, narrowed inside each word."""
    boxes: list[Region] = []
    confidences: list[float] = []
    offset = 0
    for word in line.words:
        first, last = max(start, offset), min(end, offset + len(word.text))
        if first < last:
            share = word.width / len(word.text)
            left = word.x + round((first - offset) * share)
            right = word.x + round((last - offset) * share)
            boxes.append((left, word.y, max(right - left, 1), word.height))
            confidences.append(word.confidence)
        offset += len(word.text) + 1
    x, y, width, height = _union(boxes)
    return TextMatch(text, x, y, width, height, min(confidences) / 100.0, line.text)


def find_in_lines(pattern: Pattern, lines: Iterable[OcrLine]) -> list[TextMatch]:
    """Every place ``pattern`` matches within one line, most confident reading per place,
    in reading order (top to bottom, then left to right).

    A ``str`` is matched literally (case and spaces as given), a compiled regex with
    ``search`` semantics. Matches never span lines.
    """
    regex = _compile(pattern)
    found: list[TextMatch] = []
    for line in lines:
        text = line.text
        for hit in regex.finditer(text):
            if hit.end() > hit.start() and text[hit.start() : hit.end()].strip():
                found.append(_match_in_line(line, hit.start(), hit.end(), hit.group(0)))
    kept: list[TextMatch] = []
    for match in sorted(found, key=lambda m: -m.confidence):
        if not any(same_place(match.box, other.box) for other in kept):
            kept.append(match)
    return [match for row in in_rows(kept, lambda m: m.box) for match in row]


def merge_lines(lines: Iterable[OcrLine]) -> list[OcrLine]:
    """One reading per place: where lines of several variants overlap, the most confident
    (longer lines first on ties, so a line split by one variant loses to a whole one)."""
    ranked = sorted(lines, key=lambda line: (-line.confidence, -len(line.text)))
    kept: list[OcrLine] = []
    for line in ranked:
        if line.words and not any(same_place(line.box, other.box) for other in kept):
            kept.append(line)
    return kept


def in_rows(items: Iterable[T], box: Callable[[T], Region]) -> list[list[T]]:
    """``items`` in reading order: rows top to bottom (boxes sharing most of their height
    are one row), each row left to right."""
    rows: list[list[T]] = []
    for item in sorted(items, key=lambda i: box(i)[1]):
        _, top, _, height = box(item)
        for row in rows:
            _, row_top, _, row_height = box(row[0])
            shared = min(top + height, row_top + row_height) - max(top, row_top)
            if shared >= SAME_PLACE * min(height, row_height):
                row.append(item)
                break
        else:
            rows.append([item])
    return [sorted(row, key=lambda i: box(i)[0]) for row in rows]


def lines_text(lines: Iterable[OcrLine]) -> str:
    """The lines as text: one row per text row, lines side by side joined by two spaces."""
    rows = in_rows(lines, lambda line: line.box)
    return "\n".join("  ".join(line.text for line in row) for row in rows)


# -- tesseract ------------------------------------------------------------------------------


def _tessdata_dir() -> str:
    candidates = [os.environ["TESSDATA_PREFIX"]] if os.environ.get("TESSDATA_PREFIX") else []
    candidates += TESSDATA_DIRS
    for directory in candidates:
        if (Path(directory) / "eng.traineddata").is_file():
            return directory
    raise OcrUnavailable(
        "screen text needs tesseract's English data (eng.traineddata), found in none of "
        f"{', '.join(candidates)}: {OCR_APT_HINT} (or set TESSDATA_PREFIX to its directory)"
    )


_engine_lock = threading.Lock()
"""One recognition at a time: the tesseract API is not reentrant, and two would only fight
over the cores anyway."""
_engines: list[Any] = []


def _engine() -> Any:
    """The process's tesseract (loading the model costs ~0.5 s: kept); call it holding
    ``_engine_lock``."""
    if _engines:
        return _engines[0]
    try:
        # Deferred: tesserocr is the optional ``ocr`` extra (a native library).
        import tesserocr  # type: ignore[import-untyped, unused-ignore]
    except ModuleNotFoundError as error:
        if error.name != "tesserocr":
            raise
        raise OcrUnavailable(
            f"screen text needs tesserocr, which is not installed: {OCR_EXTRA_HINT} "
            f"(tesseract's English data too: {OCR_APT_HINT})"
        ) from None
    api = tesserocr.PyTessBaseAPI(path=_tessdata_dir(), lang="eng", psm=tesserocr.PSM.SPARSE_TEXT)
    _engines.append(api)
    return api


def scale_for(size: tuple[int, int]) -> int:
    """How much the scaled variant enlarges a screen of ``size``: :data:`SCALE`, less
    when that would exceed :data:`MAX_SCALED_PIXELS` (1 = no scaled variant)."""
    pixels = max(size[0] * size[1], 1)
    return max(1, min(SCALE, int((MAX_SCALED_PIXELS / pixels) ** 0.5)))


def variant_images(screen: Image.Image) -> Iterator[tuple[str, Image.Image, int]]:
    """The variants OCR reads, in :data:`VARIANTS` order: ``(name, image, scale)``."""
    grey = screen.convert("L")
    for name in VARIANTS:
        if name == "raw":
            yield name, screen.convert("RGB"), 1
        elif name == "grey":
            yield name, grey, 1
        elif name == "inverted":
            yield name, ImageOps.invert(grey), 1
        elif scale_for(grey.size) > 1:
            # Dark text on light, as tesseract was trained, three times as large: small
            # bitmap fonts (xterm's 6x13 "fixed", the VGA console's 9x16) get the
            # x-height tesseract needs (measured: 2x misreads them, 3x reads them).
            mean = sum(i * n for i, n in enumerate(grey.histogram())) / (grey.width * grey.height)
            upright = ImageOps.invert(grey) if mean < 128 else grey
            factor = scale_for(grey.size)
            size = (grey.width * factor, grey.height * factor)
            yield name, upright.resize(size, Image.Resampling.LANCZOS), factor


def ocr_lines(
    image: Image.Image, variant: str, scale: int, offset: tuple[int, int]
) -> list[OcrLine]:
    """Tesseract's lines on one variant image, boxes in screen pixels."""
    with _engine_lock:
        api = _engine()
        api.SetImage(image)
        api.Recognize()
        return _lines(api, variant, scale, offset)


def _lines(api: Any, variant: str, scale: int, offset: tuple[int, int]) -> list[OcrLine]:
    # Deferred: tesserocr is the optional ``ocr`` extra; _engine() checked it.
    from tesserocr import RIL, iterate_level  # type: ignore[import-untyped, unused-ignore]

    lines: list[OcrLine] = []
    words: list[OcrWord] = []
    for item in iterate_level(api.GetIterator(), RIL.WORD):
        if item.IsAtBeginningOf(RIL.TEXTLINE) and words:
            lines.append(OcrLine(variant, tuple(words)))
            words = []
        text = (item.GetUTF8Text(RIL.WORD) or "").strip()
        confidence = float(item.Confidence(RIL.WORD))
        box = item.BoundingBox(RIL.WORD)
        if not text or confidence < MIN_WORD_CONFIDENCE or box is None:
            continue
        left, top, right, bottom = (round(v / scale) for v in box)
        words.append(
            OcrWord(text, left + offset[0], top + offset[1], right - left, bottom - top, confidence)
        )
    if words:
        lines.append(OcrLine(variant, tuple(words)))
    return lines


def _crop(screen: Image.Image, region: Region | None) -> tuple[Image.Image, tuple[int, int]]:
    if screen.width * screen.height > MAX_SCREEN_PIXELS:
        raise ValueError(
            f"a {screen.width}x{screen.height} screenshot is too large to read "
            f"(at most {MAX_SCREEN_PIXELS} pixels)"
        )
    if region is None:
        return screen, (0, 0)
    x, y, width, height = check_region(region, screen.size)
    return screen.crop((x, y, x + width, y + height)), (x, y)


def read_variants(screen: Image.Image, region: Region | None = None) -> Iterator[list[OcrLine]]:
    """The lines of each variant in turn (blocking; run it in a thread from async code).

    :raise OcrUnavailable: tesserocr or the English data is missing.
    :raise ValueError: ``region`` is not inside the screen.
    """
    image, offset = _crop(screen, region)
    for name, variant, scale in variant_images(image):
        yield ocr_lines(variant, name, scale, offset)


def read_lines(screen: Image.Image, region: Region | None = None) -> list[OcrLine]:
    """The lines of every variant (before merging)."""
    return [line for lines in read_variants(screen, region) for line in lines]


def read_screen_text(screen: Image.Image, region: Region | None = None) -> str:
    """All text read on ``screen`` (or in ``region``), one reading per place, as rows."""
    return lines_text(merge_lines(read_lines(screen, region)))


def find_text(
    pattern: Pattern, screen: Image.Image, region: Region | None = None
) -> list[TextMatch]:
    """Every place ``pattern`` is read on ``screen`` (see :func:`find_in_lines`)."""
    return find_in_lines(pattern, read_lines(screen, region))


# -- waiting --------------------------------------------------------------------------------


def _first_match(
    pattern: Pattern, screen: Image.Image, region: Region | None
) -> tuple[TextMatch | None, list[OcrLine]]:
    """The first match, reading variant after variant; else None and every line read."""
    read: list[OcrLine] = []
    for lines in read_variants(screen, region):
        read += lines
        matches = find_in_lines(pattern, lines)
        if matches:
            return matches[0], read
    return None, read


async def wait_for_text(
    screenshot_fn: Screenshot,
    pattern: Pattern,
    timeout: float = 10.0,
    region: Region | None = None,
    events: EventSource | None = None,
) -> TextMatch:
    """Take screenshots until ``pattern`` is read on the screen; return the first match.
    Screens are taken as :func:`~pytest_adare.screen_wait.watch_screen` says.

    :raise TextNotFound: after ``timeout`` seconds, with the last screenshot (saved to a
        temporary PNG named in the message) and the text read on it.
    :raise OcrUnavailable: tesserocr or the English data is missing.
    """
    _compile(pattern)
    read: list[OcrLine] = []

    def check(screen: Image.Image) -> TextMatch | None:
        match, read[:] = _first_match(pattern, screen, region)
        return match

    watched = await watch_screen(screenshot_fn, check, timeout, events)
    if watched.result is not None:
        return watched.result
    raise _not_found(pattern, timeout, watched, lines_text(merge_lines(read)))


def _not_found(
    pattern: Pattern, timeout: float, watched: Watched[TextMatch], text: str
) -> TextNotFound:
    path = save_screenshot(watched.screen, "adare-wait-for-text-")
    shown = text if len(text) <= MAX_TEXT_IN_ERROR else text[:MAX_TEXT_IN_ERROR] + "\n[...]"
    return TextNotFound(
        f"text {describe_pattern(pattern)} not read on screen within {timeout:.1f} s "
        f"({watched.checked} distinct screens read); last screenshot saved to {path}; "
        f"text read on it:\n{shown or '(no text)'}",
        watched.screen,
        path,
        text,
    )
