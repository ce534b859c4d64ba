"""Needles: a template PNG plus a JSON sidecar with match and exclude areas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from pytest_adare.screen.match import Needle, NeedleError, TemplateMatcher, find

CLOCK_FONT = ImageFont.load_default(size=22)


def dialog(clock: str) -> Image.Image:
    """A 300x160 'dialog': a framed title, a clock that changes, two buttons."""
    image = Image.new("RGB", (300, 160), (232, 232, 232))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 299, 159), outline="black", width=2)
    draw.text((20, 12), "Save the changes?", fill="black")
    draw.text((100, 55), clock, fill="black", font=CLOCK_FONT)
    for left, label in ((30, "OK"), (170, "Cancel")):
        draw.rectangle((left, 110, left + 100, 140), outline=(90, 90, 90), width=2)
        draw.text((left + 35, 118), label, fill="black")
    return image


def on_screen(window: Image.Image, at: tuple[int, int] = (200, 120)) -> Image.Image:
    screen = Image.new("RGB", (640, 480), (40, 60, 90))
    ImageDraw.Draw(screen).ellipse((500, 300, 600, 400), fill=(200, 120, 40))
    screen.paste(window, at)
    return screen


def write_needle(tmp_path: Path, spec: object | None, image: Image.Image | None = None) -> Path:
    png = tmp_path / "dialog.png"
    (image or dialog("12:00:00")).save(png)
    if spec is not None:
        png.with_suffix(".json").write_text(json.dumps(spec))
    return png


def test_a_png_without_sidecar_is_the_whole_image(tmp_path: Path) -> None:
    needle = Needle.load(write_needle(tmp_path, None))
    assert (needle.match, needle.exclude, needle.threshold, needle.click) == ((), (), 0.9, None)
    assert needle.bounds == (0, 0, 300, 160)
    assert needle.click_offset() == (150, 80)
    assert needle.template_and_mask()[1] is None


def test_the_sidecar_gives_areas_threshold_and_click_point(tmp_path: Path) -> None:
    spec = {
        "match": [[10, 5, 280, 150]],
        "exclude": [{"x": 100, "y": 55, "width": 100, "height": 25}],
        "threshold": 0.95,
        "click": [80, 125],
    }
    needle = Needle.load(write_needle(tmp_path, spec))
    assert needle.match == ((10, 5, 280, 150),)
    assert needle.exclude == ((100, 55, 100, 25),)
    assert needle.threshold == 0.95 and needle.click == (80, 125)
    assert needle.bounds == (10, 5, 280, 150)
    assert needle.click_offset() == (70, 120)
    template, mask = needle.template_and_mask()
    assert template.size == mask.size == (280, 150)  # type: ignore[union-attr]
    assert mask is not None and mask.getpixel((100 - 10, 55 - 5)) == 0
    assert mask.getpixel((0, 0)) == 255


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([1, 2], "expected a JSON object"),
        ({"match": [[0, 0, 10, 10]], "colour": 1}, r"unknown key\(s\) colour"),
        ({"match": [[0, 0, 10]]}, r"match\[0\]: expected \[x, y, width, height\]"),
        ({"exclude": [[290, 0, 20, 10]]}, r"exclude\[0\]: \[290, 0, 20, 10\] is not inside"),
        ({"match": [[0, 0, 0, 10]]}, "is not inside"),
        ({"threshold": 1.5}, r"threshold must be a number in \(0, 1\]"),
        ({"threshold": True}, "threshold must be a number"),
        ({"click": [400, 10]}, r"click must be \[x, y\] inside the image"),
    ],
)
def test_a_bad_sidecar_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, spec: object, message: str
) -> None:
    png = write_needle(tmp_path, spec)
    with pytest.raises(NeedleError, match=message) as raised:
        Needle.load(png)
    assert str(png.with_suffix(".json")) in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_a_sidecar_that_is_not_json_is_refused(tmp_path: Path) -> None:
    png = write_needle(tmp_path, None)
    png.with_suffix(".json").write_text("{match: }")
    with pytest.raises(NeedleError, match="not readable JSON"):
        Needle.load(png)


def test_an_exclude_area_lets_the_needle_match_after_that_area_changed(tmp_path: Path) -> None:
    # The title and the clock below it: the clock ticks, the title identifies the dialog.
    area = (10, 5, 230, 85)
    needle_png = write_needle(tmp_path, {"match": [list(area)], "exclude": [[95, 50, 120, 32]]})
    later = on_screen(dialog("12:34:56"))
    x, y, width, height = area
    plain = TemplateMatcher(dialog("12:00:00").crop((x, y, x + width, y + height))).best(later)
    assert plain.score < 0.9  # the changed clock spoils the plain template
    box = find(str(needle_png), later)  # the path picks up the sidecar
    assert box is not None and (box.x, box.y) == (200 + x, 120 + y) and box.score > 0.99


def test_several_match_areas_compare_only_themselves(tmp_path: Path) -> None:
    # Only the two buttons count: the title and the clock may say anything.
    spec = {"match": [[30, 110, 101, 31], [170, 110, 101, 31]], "click": [80, 125]}
    needle = Needle.load(write_needle(tmp_path, spec))
    changed = dialog("99:99:99")
    ImageDraw.Draw(changed).text((20, 12), "Discard everything?", fill="black")
    matcher = TemplateMatcher(needle)
    box = find(matcher, on_screen(changed, at=(50, 60)))
    assert box is not None and (box.x, box.y) == (50 + 30, 60 + 110)
    assert matcher.click_offset == (50, 15)


def test_excluding_every_matched_pixel_is_refused() -> None:
    needle = Needle.from_spec(dialog("1"), {"match": [[0, 0, 50, 50]], "exclude": [[0, 0, 60, 60]]})
    with pytest.raises(ValueError, match="leave nothing"):
        TemplateMatcher(needle)
