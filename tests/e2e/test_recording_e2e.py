"""The failure film end to end: an inner pytest run on the desktop image (one boot).

A test that types three lines into the terminal and then fails gets an animated
``recording.webp`` in its artifacts, with more than one distinct frame, named in the
report and embedded in the pytest-html report; the test that passes before it gets no
film (``--adare-record`` defaults to ``on-failure``).
"""

from __future__ import annotations

import base64
import importlib.util
import os
from pathlib import Path

import pytest
from PIL import Image

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INNER_TIMEOUT = 900
HAVE_PYTEST_HTML = importlib.util.find_spec("pytest_html") is not None

SCENARIO = """
def test_1_passes(guest):
    guest.keyboard.type("echo quiet")
    guest.keyboard.press("enter")

def test_2_types_then_fails(guest):
    for step in ("first", "second", "third"):
        guest.keyboard.type(f"echo {step} step | tr a-z A-Z")
        guest.keyboard.press("enter")
        guest.wait_for_text(f"{step.upper()} STEP", timeout=90)
    assert guest.find_text("Saved"), "the editor never said Saved"
"""


def frames_of(film: Path) -> list[bytes]:
    with Image.open(film) as animation:
        frames = []
        for index in range(getattr(animation, "n_frames", 1)):
            animation.seek(index)
            frames.append(animation.convert("RGB").tobytes())
    return frames


def test_a_failing_test_gets_a_film_and_a_passing_one_none(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_film=SCENARIO)
    artifacts = tmp_path / "artifacts"
    html = tmp_path / "report.html"
    html_args = [f"--html={html}", "--self-contained-html"] if HAVE_PYTEST_HTML else []
    image = os.environ.get("ADARE_TEST_DESKTOP_IMAGE", "debian-desktop")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--adare-vm={image}", f"--adare-artifacts={artifacts}",
        *html_args, timeout=INNER_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*adare recording*", "*recording.webp: * distinct frames*"])
    [failed_dir] = [d for d in artifacts.iterdir() if "test_2" in d.name]
    film = failed_dir / "recording.webp"
    frames = frames_of(film)
    assert len(frames) > 1 and len(set(frames)) > 1, "the film shows no change"
    assert not list(artifacts.glob("*test_1*/recording*.webp"))
    if HAVE_PYTEST_HTML:
        assert base64.b64encode(film.read_bytes()).decode("ascii") in html.read_text()
