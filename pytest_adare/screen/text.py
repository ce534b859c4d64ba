"""Read text on the guest's screen: tesseract OCR on the host, matching over word boxes.

::

    text = guest.screen_text()                            # every line read, top to bottom
    [match] = guest.find_text("Save the changes?")        # TextMatch(text, x, y, ..., confidence)
    match = guest.wait_for_text(re.compile(r"saved \\d+ files"), timeout=30)
    guest.click(*match.center)                            # or guest.click_text("OK")

The OCR runs on the host (no work in the guest) through ``tesserocr`` (the ``ocr``
extra; why not ``pytesseract``: docs/gui.md) on several variants of one screenshot:
the raw image, grey levels, inverted grey (light-on-dark terminals), and grey as dark
on light scaled up three times (small bitmap fonts: xterm's, the VGA console's), and
last the same with light-on-dark bands turned round too (a selected line or list item,
a dark title bar: :mod:`pytest_adare.screen.polarity`).
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
:func:`~pytest_adare.screen.wait.watch_screen` says), stops at the first variant
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

from PIL import Image, ImageFilter, ImageOps

from pytest_adare.errors import AdareError
from pytest_adare.screen import polarity
from pytest_adare.screen.wait import (
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
VARIANTS = ("raw", "inverted", "scaled", "grey", "banded")
"""The order variants are read in (a wait stops at the first that matches). ``banded``
comes last: it reads what the others cannot (light on dark inside dark on light), but
turns some plain places round that ``scaled`` reads right, so it is never read first."""
FALLBACK_VARIANTS = frozenset({"banded"})
"""Variants whose readings never replace another variant's at the same place (only what
the others missed)."""
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
    distance: int = 0
    """How many edits away from the pattern the text read is (``max_distance`` searches)."""

    @property
    def box(self) -> Region:
        return self.x, self.y, self.width, self.height


class TextWaitTimeout(AdareError, TimeoutError):
    """A wait on screen text ran out.

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


class TextNotFound(TextWaitTimeout):
    """The text did not show within the timeout."""


class TextStillShown(TextWaitTimeout):
    """The text was still on the screen when a wait for it to go ran out."""


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


def _compile(pattern: Pattern, ignore_case: bool = False) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        if ignore_case and not pattern.flags & re.IGNORECASE:
            return re.compile(pattern.pattern, pattern.flags | re.IGNORECASE)
        return pattern
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"the text to find must be a non-empty string or a regex, got {pattern!r}")
    return re.compile(re.escape(pattern), re.IGNORECASE if ignore_case else 0)


@dataclass(frozen=True)
class TextQuery:
    """What a text search looks for: ``pattern`` (literal text or a compiled regex), with
    ``ignore_case``, and for literal text up to ``max_distance`` edits (OCR misreads:
    ``0`` for ``O``, a dropped or an extra character).

    :raise ValueError: an empty pattern, a negative distance, a distance on a regex, or
        one that would let any text of the pattern's length match.
    """

    pattern: Pattern
    ignore_case: bool = False
    max_distance: int = 0

    def __post_init__(self) -> None:
        _compile(self.pattern)  # a clear error for an empty or wrong pattern, now
        if type(self.max_distance) is not int or self.max_distance < 0:
            raise ValueError(f"max_distance must be an int >= 0, got {self.max_distance!r}")
        if self.max_distance and isinstance(self.pattern, re.Pattern):
            raise ValueError("max_distance works on literal text, not on a regex")
        if self.max_distance and self.max_distance >= len(str(self.pattern).strip()):
            raise ValueError(
                f"max_distance={self.max_distance} would match any text: the pattern "
                f"{self.pattern!r} has only {len(str(self.pattern).strip())} characters"
            )

    @property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern, self.ignore_case)

    def spans(self, text: str) -> list[tuple[int, int, int]]:
        """``(start, end, edits)`` of every place the query matches in ``text``."""
        if not self.max_distance:
            return [
                (hit.start(), hit.end(), 0)
                for hit in self.regex.finditer(text)
                if hit.end() > hit.start() and text[hit.start() : hit.end()].strip()
            ]
        return fuzzy_spans(str(self.pattern).strip(), text, self.max_distance, self.ignore_case)


def fuzzy_spans(
    needle: str, text: str, max_distance: int, ignore_case: bool = False
) -> list[tuple[int, int, int]]:
    """Places in ``text`` within ``max_distance`` edits (Levenshtein) of ``needle``:
    ``(start, end, edits)``, the closest of overlapping candidates, left to right.

    >>> fuzzy_spans("Trash", "Move to Tr4sh now", 1)
    [(8, 13, 1)]
    """
    fold = str.lower if ignore_case else str
    want = [fold(c) for c in needle]
    # Sellers' variant of the edit distance: a match may start anywhere in ``text``
    # (row 0 costs nothing at every column). Each cell carries where its match started,
    # so a hit's span is known without a second pass.
    previous = [(i, 0) for i in range(len(want) + 1)]
    hits: list[tuple[int, int, int]] = []
    for end, char in enumerate(text, 1):
        char = fold(char)
        current = [(0, end)]
        for i, wanted in enumerate(want, 1):
            current.append(
                min(
                    (previous[i - 1][0] + (wanted != char), previous[i - 1][1]),
                    (previous[i][0] + 1, previous[i][1]),
                    (current[i - 1][0] + 1, current[i - 1][1]),
                    key=lambda cell: cell[0],
                )
            )
        edits, start = current[-1]
        while start < end and text[start].isspace():
            start += 1
        if edits <= max_distance and text[start:end].strip():
            hits.append((start, len(text[:end].rstrip()), edits))
        previous = current
    kept: list[tuple[int, int, int]] = []
    for hit in sorted(hits, key=lambda h: (h[2], abs((h[1] - h[0]) - len(want)), h[0])):
        if all(hit[1] <= other[0] or hit[0] >= other[1] for other in kept):
            kept.append(hit)
    return sorted(kept)


def describe_pattern(pattern: Pattern) -> str:
    """``'OK'`` or ``re.compile('saved \\d+')`` for messages."""
    return repr(pattern) if isinstance(pattern, str) else f"re.compile({pattern.pattern!r})"


def _match_in_line(line: OcrLine, start: int, end: int, text: str, edits: int = 0) -> TextMatch:
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
    return TextMatch(text, x, y, width, height, min(confidences) / 100.0, line.text, edits)


def find_in_lines(pattern: Pattern | TextQuery, lines: Iterable[OcrLine]) -> list[TextMatch]:
    """Every place ``pattern`` matches within one line, most confident reading per place
    (fewest edits first for a fuzzy :class:`TextQuery`), in reading order (top to
    bottom, then left to right).

    A ``str`` is matched literally (case and spaces as given), a compiled regex with
    ``search`` semantics; a :class:`TextQuery` adds ``ignore_case`` and
    ``max_distance``. Matches never span lines.
    """
    query = pattern if isinstance(pattern, TextQuery) else TextQuery(pattern)
    found: list[TextMatch] = []
    for line in lines:
        text = line.text
        for start, end, edits in query.spans(text):
            found.append(_match_in_line(line, start, end, text[start:end], edits))
    kept: list[TextMatch] = []
    for match in sorted(found, key=lambda m: (m.distance, -m.confidence)):
        if not any(same_place(match.box, other.box) for other in kept):
            kept.append(match)
    return [match for row in in_rows(kept, lambda m: m.box) for match in row]


def merge_lines(lines: Iterable[OcrLine]) -> list[OcrLine]:
    """One reading per place: where lines of several variants overlap, the most confident
    (longer lines first on ties, so a line split by one variant loses to a whole one).
    A :data:`FALLBACK_VARIANTS` line only fills a place no other variant read."""
    ranked = sorted(
        lines,
        key=lambda line: (line.variant in FALLBACK_VARIANTS, -line.confidence, -len(line.text)),
    )
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


POLARITY_BLOCK = 8
POLARITY_MEDIAN = 5
""":func:`dark_on_light` judges each place's background by the median of the
``POLARITY_MEDIAN``x``POLARITY_MEDIAN`` blocks of ``POLARITY_BLOCK`` pixels around it (40 px)."""


def dark_on_light(grey: Image.Image) -> Image.Image:
    """``grey`` with every dark-background place inverted: dark text on light everywhere.

    A screen mixes both: a white terminal on the desktop's black root window. Deciding
    once for the whole screen (by its mean) inverted the terminal with the background and
    tesseract then read nothing of its 6x13 font. Text strokes are a minority of any
    place's pixels, so the median of the blocks around a pixel is its background; the
    blocks are means of 8x8 pixels so the median filter costs a few milliseconds.
    """
    if min(grey.size) < POLARITY_BLOCK * POLARITY_MEDIAN:
        mean = sum(i * n for i, n in enumerate(grey.histogram())) / (grey.width * grey.height)
        return ImageOps.invert(grey) if mean < 128 else grey
    background = grey.reduce(POLARITY_BLOCK).filter(ImageFilter.MedianFilter(POLARITY_MEDIAN))
    dark = background.point(lambda v: 255 if v < 128 else 0).resize(
        grey.size, Image.Resampling.NEAREST
    )
    return Image.composite(ImageOps.invert(grey), grey, dark)


BANDED_SMOOTHING = 1.0
"""The Gaussian radius (px, at 3x) ``banded`` is smoothed with before its threshold."""


def _binary(level: int) -> int:
    return 255 if level > 128 else 0


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
            # ``banded`` also turns round the bands a 40 px median cannot see (a
            # selected line or list item, a dark title bar: screen/polarity.py), and is
            # black and white after scaling: the resampled grey edges of a bitmap font
            # made tesseract drop whole words ('BRAVO' of an xterm line, read
            # binarised). Smoothed before the threshold: thresholded as scaled, a
            # bitmap '5' keeps the square corners of an 'S' and a number after a word
            # was read as one ('BRAVO S424', in 1 of 13 lines of four random digits);
            # rounded, none of 140 was.
            factor = scale_for(grey.size)
            size = (grey.width * factor, grey.height * factor)
            if name == "scaled":
                yield name, dark_on_light(grey).resize(size, Image.Resampling.LANCZOS), factor
            else:
                scaled = polarity.dark_on_light(grey).resize(size, Image.Resampling.LANCZOS)
                smooth = scaled.filter(ImageFilter.GaussianBlur(BANDED_SMOOTHING * factor / 3))
                yield name, smooth.point(_binary), factor


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
        text = _word_text(item, RIL.WORD)
        if not text:
            continue
        confidence = float(item.Confidence(RIL.WORD))
        box = item.BoundingBox(RIL.WORD)
        if confidence < MIN_WORD_CONFIDENCE or box is None:
            continue
        left, top, right, bottom = (round(v / scale) for v in box)
        words.append(
            OcrWord(text, left + offset[0], top + offset[1], right - left, bottom - top, confidence)
        )
    if words:
        lines.append(OcrLine(variant, tuple(words)))
    return lines


def _word_text(item: Any, level: int) -> str:
    """The text of one word box, ``""`` for a box that holds none.

    Tesseract lays out word boxes before it reads them; on a black screen, or a black
    root window beside a terminal, some boxes end up without text, and tesserocr 2.13
    raises ``RuntimeError('No text returned')`` for them where older releases returned
    ``None``. Either way that box is no word.
    """
    try:
        text = item.GetUTF8Text(level)
    except RuntimeError:
        return ""
    return (text or "").strip()


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
    pattern: Pattern | TextQuery, screen: Image.Image, region: Region | None = None
) -> list[TextMatch]:
    """Every place ``pattern`` is read on ``screen`` (see :func:`find_in_lines`)."""
    return find_in_lines(pattern, read_lines(screen, region))


# -- waiting --------------------------------------------------------------------------------


def _first_match(
    query: TextQuery, screen: Image.Image, region: Region | None
) -> tuple[TextMatch | None, list[OcrLine]]:
    """The first match, reading variant after variant; else None and every line read."""
    read: list[OcrLine] = []
    for lines in read_variants(screen, region):
        read += lines
        matches = find_in_lines(query, lines)
        if matches:
            return matches[0], read
    return None, read


async def wait_for_text(
    screenshot_fn: Screenshot,
    pattern: Pattern | TextQuery,
    timeout: float = 10.0,
    region: Region | None = None,
    events: EventSource | None = None,
    *,
    index: int = 1,
    near: tuple[int, int] | None = None,
) -> TextMatch:
    """Take screenshots until ``pattern`` is read on the screen; return the match:
    the first in reading order, the ``index``-th (from 1), or with ``near=(x, y)``
    the closest to that point (``index`` then counts from the closest). Screens are
    taken as :func:`~pytest_adare.screen.wait.watch_screen` says.

    :raise TextNotFound: after ``timeout`` seconds, with the last screenshot (saved to a
        temporary PNG named in the message) and the text read on it.
    :raise OcrUnavailable: tesserocr or the English data is missing.
    """
    query = pattern if isinstance(pattern, TextQuery) else TextQuery(pattern)
    check_pick(index, near)
    read: list[OcrLine] = []

    def check(screen: Image.Image) -> TextMatch | None:
        if index == 1 and near is None:  # the common case stops at the first variant
            match, read[:] = _first_match(query, screen, region)
            return match
        read[:] = read_lines(screen, region)
        return pick(find_in_lines(query, read), index, near)

    watched = await watch_screen(screenshot_fn, check, timeout, events)
    if watched.result is not None:
        return watched.result
    wanted = "" if index == 1 else f" (match number {index})"
    raise _timeout(
        TextNotFound,
        f"text {describe_pattern(query.pattern)}{wanted} not read on screen within {timeout:.1f} s",
        watched,
        lines_text(merge_lines(read)),
    )


async def wait_for_text_gone(
    screenshot_fn: Screenshot,
    pattern: Pattern | TextQuery,
    timeout: float = 10.0,
    region: Region | None = None,
    events: EventSource | None = None,
) -> None:
    """Take screenshots until ``pattern`` is read nowhere on the screen (every variant
    is read: a match in any one of them means it is still there).

    :raise TextStillShown: after ``timeout`` seconds, with the last screenshot, the
        text read on it and where the pattern still was.
    """
    query = pattern if isinstance(pattern, TextQuery) else TextQuery(pattern)
    read: list[OcrLine] = []
    still: list[TextMatch] = []

    def check(screen: Image.Image) -> bool | None:
        read[:] = read_lines(screen, region)
        still[:] = find_in_lines(query, read)
        return True if not still else None

    watched = await watch_screen(screenshot_fn, check, timeout, events)
    if watched.result is not None:
        return
    where = ", ".join(f"({m.x}, {m.y}) {m.text!r}" for m in still[:5])
    raise _timeout(
        TextStillShown,
        f"text {describe_pattern(query.pattern)} still read on screen after "
        f"{timeout:.1f} s, at {where}",
        watched,
        lines_text(merge_lines(read)),
    )


E = TypeVar("E", bound="TextWaitTimeout")


def _timeout(kind: type[E], what: str, watched: Watched[Any], text: str) -> E:
    path = save_screenshot(watched.screen, "adare-wait-for-text-")
    shown = text if len(text) <= MAX_TEXT_IN_ERROR else text[:MAX_TEXT_IN_ERROR] + "\n[...]"
    return kind(
        f"{what} ({watched.checked} distinct screens read); last screenshot saved to "
        f"{path}; text read on it:\n{shown or '(no text)'}",
        watched.screen,
        path,
        text,
    )
