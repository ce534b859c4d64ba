"""The failure film's ring buffer: bounded by frames, bytes and seconds; a blinking cursor
is no new frame; films it writes."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from pytest_adare.machine_tools.screen_recorder import STILL_BOX, FrameRing, ScreenRecorder


def encoded(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def png(label: str, size: tuple[int, int] = (160, 120)) -> bytes:
    """A whole screen that changes with ``label`` (its colour too: more than a cursor)."""
    colour = tuple(hashlib.sha256(label.encode()).digest()[:3])
    image = Image.new("RGB", size, colour)  # type: ignore[arg-type]
    ImageDraw.Draw(image).text((10, 10), label, fill="white")
    return encoded(image)


CELL = (9, 16)  # a VGA text cell: the console's cursor is one


def console(typed: str, *, cursor: bool) -> bytes:
    """A 720x400 text console: a prompt, ``typed`` after it, the block cursor on or off."""
    image = Image.new("RGB", (720, 400), "black")
    draw = ImageDraw.Draw(image)
    draw.text((0, 0), "Debian GNU/Linux 12 adare-debian tty1", fill="lightgrey")
    line = "root@adare-debian:~# " + typed
    for column, char in enumerate(line):
        draw.text((column * CELL[0], 2 * CELL[1]), char, fill="lightgrey")
    if cursor:
        x = len(line) * CELL[0]
        draw.rectangle((x, 2 * CELL[1], x + CELL[0] - 1, 3 * CELL[1] - 1), fill="lightgrey")
    return encoded(image)


def test_a_blinking_cursor_on_a_still_screen_is_one_frame() -> None:
    ring = FrameRing(max_frames=41, max_seconds=20, max_bytes=1 << 24)
    for tick in range(20):  # 10 s at 2 fps, the cursor on and off
        ring.add(tick / 2, console("ls", cursor=tick % 3 != 1))
    assert len(ring) == 1
    assert ring.durations_ms() == [9500]  # shown the whole time, until the last screendump


def test_typing_makes_frames_once_the_change_outgrows_the_box() -> None:
    ring = FrameRing(max_frames=41, max_seconds=20, max_bytes=1 << 24)
    word = "systemctl status"
    for index in range(len(word) + 1):
        ring.add(float(index), console(word[:index], cursor=index % 2 == 0))
    # Each frame kept is more than STILL_BOX wide away from the one before: every 3-4 cells.
    assert 1 + len(word) * CELL[0] // (STILL_BOX[0] + CELL[0]) <= len(ring) < len(word) // 2
    decoded = [Image.open(io.BytesIO(frame.png)) for frame in ring.frames()]
    assert decoded[-1].tobytes() != decoded[0].tobytes()


@pytest.mark.parametrize(
    ("box", "new_frame"),
    [(STILL_BOX, False), ((STILL_BOX[0] + 1, 4), True), ((2, STILL_BOX[1] + 1), True)],
)
def test_a_change_larger_than_the_still_box_either_way_is_a_new_frame(
    box: tuple[int, int], new_frame: bool
) -> None:
    ring = FrameRing(max_frames=10, max_seconds=60, max_bytes=1 << 24)
    screen = Image.new("RGB", (320, 200), "navy")
    ring.add(0.0, encoded(screen))
    ImageDraw.Draw(screen).rectangle((100, 50, 100 + box[0] - 1, 50 + box[1] - 1), fill="white")
    assert ring.add(0.5, encoded(screen)) is new_frame
    assert len(ring) == 1 + new_frame


def test_a_still_screen_is_stored_once_and_only_extends_its_time() -> None:
    ring = FrameRing(max_frames=10, max_seconds=60, max_bytes=1 << 20)
    assert ring.add(1.0, png("a")) is True
    assert ring.add(1.5, png("a")) is False
    assert ring.add(2.0, png("a")) is False
    assert len(ring) == 1 and ring.last_seen == 2.0
    assert ring.add(3.0, png("b")) is True
    ring.add(3.25, png("b"))
    assert ring.durations_ms() == [2000, 250]


def test_no_more_than_max_frames_are_kept_newest_last() -> None:
    ring = FrameRing(max_frames=3, max_seconds=60, max_bytes=1 << 20)
    frames = [png(str(i)) for i in range(6)]
    for i, data in enumerate(frames):
        ring.add(float(i), data)
    assert [f.png for f in ring.frames()] == frames[3:]


def test_the_bytes_held_stay_under_the_budget() -> None:
    one = len(png("0"))
    ring = FrameRing(max_frames=100, max_seconds=60, max_bytes=3 * one + one // 2)
    for i in range(20):
        ring.add(float(i), png(str(i % 10)))
        assert ring.size <= ring.max_bytes
    assert 2 <= len(ring) <= 4
    assert ring.size == sum(len(f.png) for f in ring.frames())


def test_a_frame_larger_than_the_whole_budget_is_not_kept() -> None:
    ring = FrameRing(max_frames=10, max_seconds=60, max_bytes=100)
    ring.add(0.0, png("big"))
    assert len(ring) == 0 and ring.size == 0


def test_only_the_last_seconds_are_kept_starting_with_what_showed_at_their_start() -> None:
    ring = FrameRing(max_frames=100, max_seconds=10, max_bytes=1 << 20)
    for second in range(0, 30, 4):  # a new screen every 4 s: 0, 4, ..., 28
        ring.add(float(second), png(str(second)))
    ring.add(30.0, png("28"))
    # Window [20, 30]: the frame from 20 started it; 16's successor (20) is not newer than 20.
    assert [f.at for f in ring.frames()] == [20.0, 24.0, 28.0]
    assert sum(ring.durations_ms()) == 10_000


def test_a_ring_needs_room() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FrameRing(max_frames=0, max_seconds=1, max_bytes=1)


@pytest.mark.parametrize("suffix", [".webp", ".gif"])
def test_the_film_is_an_animation_of_the_distinct_frames_with_their_durations(
    tmp_path: Path, suffix: str
) -> None:
    recorder = ScreenRecorder(lambda: None, fps=2, seconds=20)  # type: ignore[arg-type, return-value]
    for at, label in ((0.0, "one"), (0.5, "two"), (1.5, "three"), (2.0, "three")):
        recorder.ring.add(at, png(label))
    film = recorder.save_film(tmp_path / f"film{suffix}")
    assert film is not None
    with Image.open(film) as animation:
        count: int = getattr(animation, "n_frames", 1)
        assert count == 3
        shown = []
        for index in range(count):
            animation.seek(index)
            animation.load()  # WebP fills in a frame's info when it is decoded
            shown.append(animation.info["duration"])
    assert shown == [500, 1000, 500]


def test_nothing_captured_writes_no_film(tmp_path: Path) -> None:
    recorder = ScreenRecorder(lambda: None)  # type: ignore[arg-type, return-value]
    assert recorder.save_film(tmp_path / "film.webp") is None
    assert not (tmp_path / "film.webp").exists()
    assert recorder.describe().startswith("0 distinct frames")


def test_frames_of_a_large_screen_are_scaled_down_in_the_film(tmp_path: Path) -> None:
    recorder = ScreenRecorder(lambda: None)  # type: ignore[arg-type, return-value]
    recorder.ring.add(0.0, png("4k", size=(3840, 2160)))
    recorder.ring.add(1.0, png("4k again", size=(3840, 2160)))
    film = recorder.save_film(tmp_path / "film.webp")
    assert film is not None
    with Image.open(film) as animation:
        width, height = animation.size
    assert width * height <= 1280 * 1024 and abs(width / height - 16 / 9) < 0.01
