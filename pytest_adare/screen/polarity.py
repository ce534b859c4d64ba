"""Every place of a screen as dark text on a light background, the way tesseract reads.

A screen mixes both polarities: a white terminal on a black root window, a selected
line or list item (light on dark inside dark on light), a dark title bar, a dark theme
with a light selection. :func:`dark_on_light` inverts the places whose background is
dark and leaves the rest, in two steps on a grey image (pure PIL, a few tens of ms on
a 1024x768 screen):

- **Areas**: a place's background is the median of the 8x8-pixel blocks in the 40 px
  around it. Text strokes are a minority of any place's pixels, so this judges a
  terminal or a dark panel right; it is blind to anything thinner than about 20 px.
- **Bands**: a selected line is 13-20 px high and starts at its first letter, so its
  edge must be exact to the pixel or the letter next to it is cut. A band is found by
  its rows: dark runs of :data:`RUN` pixels or more (its margins above and below the
  text, the gaps between words) with only short light strokes between them in each
  column (shorter than :data:`GAP`; a light run of :data:`WIDE` pixels in a row is
  background, never a stroke, so two dark things are not bridged across the light
  between them); and most of its pixels dark, which lines of ordinary dark text
  closed up the same way are not. Light bands on dark (a light selection in a dark
  terminal) are found the same way and keep their polarity; a dark band wins over
  everything, a light band over the areas.

Runs are measured with 1-D erosions and dilations built from shifted copies
(``ImageChops.darker``/``lighter``; doubling the reach each step), which PIL has no
filter for.

>>> from PIL import ImageDraw
>>> screen = Image.new("L", (200, 40), 255)
>>> draw = ImageDraw.Draw(screen)
>>> draw.rectangle((10, 10, 189, 24), fill=0)  # a selected line, 15 px high
>>> draw.text((10, 11), "BRAVO second line", fill=255)  # its text, from its left edge
>>> upright, band = dark_on_light(screen), (10, 10, 190, 25)
>>> upright.crop(band) == ImageOps.invert(screen.crop(band))
True
>>> upright.crop((0, 0, 200, 10)) == screen.crop((0, 0, 200, 10))  # the rest as it was
True
"""

from __future__ import annotations

from PIL import Image, ImageChops, ImageFilter, ImageOps

DARK_BELOW = 128
"""A grey level below this is dark."""
AREA_BLOCK = 8
AREA_MEDIAN = 5
"""Areas: the median of ``AREA_MEDIAN`` x ``AREA_MEDIAN`` blocks of ``AREA_BLOCK`` px."""
RUN = 13
"""A band's background has runs at least this long in its rows."""
LIGHT_RUN = 41
"""The same for a light band in a dark area: longer, because the strokes of large light
text on dark (a 30 pt heading) are light runs of 13-35 px with the dark between them."""
WIDE = 31
"""A run of the other polarity this long in a row is background, not a text stroke."""
STROKE = 4
"""The widest stroke of a band's first letter that a wide light run beside the band may
touch and not take from it (a stem of the 13-20 px fonts of terminals, lists, menus)."""
GAP = 15
"""Strokes shorter than this (in a column) between a band's background rows are its text:
the height of a glyph of the 13-20 px lines of terminals, lists and menus."""
SHARE = 0.5
SHARE_BLOCK = (8, 4)
SHARE_REACH = 2
"""A band's pixels are judged by the share of background among the band's pixels in the
blocks of ``SHARE_BLOCK`` px up to ``SHARE_REACH`` blocks around (40x20 px): a whole
band's height with its margins, so bold text in a band passes (about 65% background)
and a line of text between two rules does not (about 40%)."""


def dark_on_light(grey: Image.Image) -> Image.Image:
    """``grey`` (mode ``L``) with every dark-background place inverted (see the module)."""
    dark = grey.point(lambda v: 255 if v < DARK_BELOW else 0)
    light = ImageOps.invert(dark)
    areas = _dark_areas(grey)
    light_bands = _bands(light, dark, bare_runs=False, run=LIGHT_RUN)
    dark_bands = _bands(dark, light, bare_runs=True)
    # Where a dark area's edge (judged over 40 px, so it can reach a few px into a light
    # terminal beside a dark root window) meets a dark band that a light band also
    # covers, the band's own pixels decide: mostly dark, it is a dark band (a selection
    # starting at the terminal's first column), else a light one in a dark area.
    contested = ImageChops.darker(ImageChops.darker(areas, light_bands), dark_bands)
    own_dark = ImageChops.darker(dark, contested).reduce(SHARE_BLOCK)
    share = ImageChops.subtract(contested.reduce(SHARE_BLOCK).point(lambda v: int(v * SHARE)),
                                own_dark)  # fmt: skip
    darkish = share.point(lambda v: 0 if v > 0 else 255).resize(grey.size, Image.Resampling.NEAREST)
    won = ImageChops.darker(contested, darkish)
    region = ImageChops.lighter(
        ImageChops.subtract(areas, light_bands),
        ImageChops.lighter(ImageChops.subtract(dark_bands, areas), won),
    )
    return Image.composite(ImageOps.invert(grey), grey, region)


def _dark_areas(grey: Image.Image) -> Image.Image:
    """255 where the 40 px around a place are mostly dark (the whole image's mean when
    it is too small for that)."""
    if min(grey.size) < AREA_BLOCK * AREA_MEDIAN:
        mean = sum(i * n for i, n in enumerate(grey.histogram())) / (grey.width * grey.height)
        return Image.new("L", grey.size, 255 if mean < DARK_BELOW else 0)
    background = grey.reduce(AREA_BLOCK).filter(ImageFilter.MedianFilter(AREA_MEDIAN))
    mask = background.point(lambda v: 255 if v < DARK_BELOW else 0)
    return mask.resize(grey.size, Image.Resampling.NEAREST)


def _bands(
    background: Image.Image, strokes: Image.Image, *, bare_runs: bool, run: int = 0
) -> Image.Image:
    """255 on the bands whose background is ``background`` (a 0/255 mask; ``strokes`` is
    its complement), their text included; with ``bare_runs``, also long runs with no
    text between them (an empty stretch of a band, a rule)."""
    rows = _opening(background, run or RUN, vertical=False)
    closed = _closing(rows, GAP, vertical=True)
    # Judged on everything between the runs: the light rows around a line of ordinary
    # text between two rules count against it, the dark gaps of a band's text for it.
    between = ImageChops.subtract(closed, rows)
    near = ImageFilter.BoxBlur(SHARE_REACH)
    own = ImageChops.darker(background, between).reduce(SHARE_BLOCK).filter(near)
    total = between.reduce(SHARE_BLOCK).filter(near)
    rejected = ImageChops.subtract(total.point(lambda v: int(v * SHARE)), own)
    if not bare_runs:  # a stroke of a large glyph is a long run with nothing between
        rejected = ImageChops.lighter(rejected, total.point(lambda v: 255 if v == 0 else 0))
    # One block further: a band's first column may share its block with what is left of it.
    kept = rejected.point(lambda v: 0 if v > 0 else 255).filter(ImageFilter.MaxFilter(3))
    kept = kept.resize(background.size, Image.Resampling.NEAREST)
    # A wide light run ends STROKE px short: a band that starts at its first letter (an
    # xterm selection) joins that letter's stem to the light margin left of the band,
    # one run, and the stem was cut off the band ('BRAVO' read as 'KRAVO', or not at all).
    wide = _reach(_opening(strokes, WIDE, vertical=False), 2 * STROKE + 1, False, grow=False)
    return ImageChops.darker(ImageChops.subtract(closed, wide), kept)


def _opening(mask: Image.Image, length: int, *, vertical: bool) -> Image.Image:
    """Only the runs of ``mask`` at least ``length`` long (odd), exactly as they were."""
    return _reach(_reach(mask, length, vertical, grow=False), length, vertical, grow=True)


def _closing(mask: Image.Image, length: int, *, vertical: bool) -> Image.Image:
    """``mask`` with its gaps shorter than ``length`` (odd) filled."""
    return _reach(_reach(mask, length, vertical, grow=True), length, vertical, grow=False)


def _reach(mask: Image.Image, length: int, vertical: bool, *, grow: bool) -> Image.Image:
    """The max (``grow``) or min of ``mask`` over the ``length`` pixels centred on each
    pixel along one axis; beyond the image counts as 0 for a max, 255 for a min (a
    band at the screen's edge is not eaten)."""
    combine = ImageChops.lighter if grow else ImageChops.darker
    outside = 0 if grow else 255
    width, height = mask.size
    pad = (0, length) if vertical else (length, 0)
    reached = Image.new("L", (width + 2 * pad[0], height + 2 * pad[1]), outside)
    reached.paste(mask, pad)
    covered = 1
    while covered < length:  # reached = the extreme over [p, p + covered)
        step = min(covered, length - covered)
        # offset wraps round; what comes round is padding, which holds ``outside``.
        ahead = ImageChops.offset(reached, *((0, -step) if vertical else (-step, 0)))
        reached = combine(reached, ahead)
        covered += step
    left, top = (0, length - length // 2) if vertical else (length - length // 2, 0)
    return reached.crop((left, top, left + width, top + height))
