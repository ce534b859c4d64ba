"""dark_on_light on drawn screens: which places turn round, to the pixel, and which stay."""

from __future__ import annotations

from PIL import Image, ImageChops, ImageDraw, ImageFont, ImageOps

from pytest_adare.screen.polarity import dark_on_light

FONT = ImageFont.load_default(size=11)
Box = tuple[int, int, int, int]


def screen(background: int = 255) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("L", (400, 200), background)
    return image, ImageDraw.Draw(image)


def turned(before: Image.Image, after: Image.Image, box: Box) -> float:
    """The share of ``box``'s pixels that ``after`` has inverted."""
    inverted = ImageOps.invert(before.crop(box))
    same = ImageChops.difference(inverted, after.crop(box)).point(lambda v: 255 if v else 0)
    return 1 - same.histogram()[255] / (same.width * same.height)


def kept(before: Image.Image, after: Image.Image, box: Box) -> float:
    same = ImageChops.difference(before.crop(box), after.crop(box)).point(lambda v: 255 if v else 0)
    return 1 - same.histogram()[255] / (same.width * same.height)


def test_a_selected_line_turns_round_to_its_first_letter_and_nothing_around_it_does() -> None:
    image, draw = screen()
    draw.text((20, 20), "ALPHA first line", fill=0, font=FONT)
    band = (20, 36, 220, 50)  # 14 px high; its text starts at its left edge
    draw.rectangle((band[0], band[1], band[2] - 1, band[3] - 1), fill=0)
    draw.text((20, 37), "BRAVO second line", fill=255, font=FONT)
    draw.text((20, 52), "CHARLIE third line", fill=0, font=FONT)
    after = dark_on_light(image)
    assert turned(image, after, band) == 1.0
    assert kept(image, after, (0, 0, 400, band[1])) == 1.0
    assert kept(image, after, (0, band[3], 400, 200)) == 1.0
    assert kept(image, after, (band[2], band[1], 400, band[3])) == 1.0


def test_a_letter_stem_on_the_bands_edge_beside_a_light_margin_stays_in_the_band() -> None:
    # xterm: the selection starts at B's stem, whose light pixels join the terminal's light
    # margin left of the band into one wide light run; that run was taken for background
    # and the stem cut off the band.
    image, draw = screen()
    band = (40, 36, 240, 49)
    draw.rectangle((band[0], band[1], band[2] - 1, band[3] - 1), fill=0)
    draw.rectangle((band[0], band[1] + 2, band[0] + 1, band[3] - 3), fill=255)  # the stem
    draw.text((band[0] + 3, band[1] + 1), "RAVO second line", fill=255, font=FONT)
    after = dark_on_light(image)
    assert turned(image, after, band) == 1.0
    assert kept(image, after, (0, 0, band[0], 200)) == 1.0  # the margin stays light


def test_part_of_a_word_selected_turns_round_alone() -> None:
    image, draw = screen()
    draw.text((20, 20), "ALPHA", fill=0, font=FONT)
    left = 20 + round(draw.textlength("A", font=FONT))
    right = 20 + round(draw.textlength("ALPHA", font=FONT))
    draw.rectangle((left, 18, right - 1, 32), fill=0)
    draw.text((left, 20), "LPHA", fill=255, font=FONT)
    after = dark_on_light(image)
    assert turned(image, after, (left, 18, right, 33)) > 0.99
    assert kept(image, after, (0, 0, left, 200)) == 1.0


def test_a_dark_title_bar_and_a_dark_panel_turn_round_whole() -> None:
    image, draw = screen()
    draw.rectangle((0, 0, 399, 25), fill=40)
    draw.text((4, 6), "Mail Settings", fill=240, font=ImageFont.load_default(size=13))
    draw.rectangle((20, 60, 379, 179), fill=30)
    draw.text((60, 90), "Large Title", fill=255, font=ImageFont.load_default(size=40))
    after = dark_on_light(image)
    assert turned(image, after, (0, 0, 400, 26)) == 1.0
    assert turned(image, after, (28, 68, 372, 172)) == 1.0  # inside the panel, heading too


def test_ordinary_text_between_rules_and_in_a_bordered_entry_stays() -> None:
    image, draw = screen()
    for row in range(6):  # underlined lines 14 px apart: text closed in by long dark runs
        y = 10 + 14 * row
        draw.text((10, y), f"{row:02d} total 48 drwxr-xr-x 2 root root 4096", fill=0, font=FONT)
        draw.line((10, y + 12, 300, y + 12), fill=0)
    draw.rectangle((10, 110, 210, 126), outline=0)  # an entry 17 px high
    draw.text((13, 112), "Search mail here", fill=0, font=FONT)
    after = dark_on_light(image)
    assert kept(image, after, (0, 0, 400, 200)) > 0.99  # at most the rules whitened


def test_a_light_selection_in_a_dark_terminal_keeps_its_polarity() -> None:
    image, draw = screen(background=0)
    draw.text((10, 10), "user@host:~$ cat notes", fill=230, font=FONT)
    band = (10, 26, 390, 40)
    draw.rectangle((band[0], band[1], band[2] - 1, band[3] - 1), fill=230)
    draw.text((10, 27), "JULIET kilo LIMA", fill=0, font=FONT)
    end = 10 + round(draw.textlength("JULIET kilo LIMA", font=FONT))
    draw.text((10, 42), "user@host:~$ echo MIKE", fill=230, font=FONT)
    after = dark_on_light(image)
    # Its text (the empty rest of the line may turn: long light runs alone are not a band,
    # or every stroke of a large light heading would be one).
    assert kept(image, after, (band[0], band[1], end, band[3])) == 1.0
    assert turned(image, after, (0, 0, 400, band[1] - 8)) == 1.0
    assert turned(image, after, (0, band[3] + 8, 400, 200)) == 1.0
