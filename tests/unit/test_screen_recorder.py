"""The failure film's ring buffer: bounded by frames, bytes and seconds; films it writes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from pytest_adare.qemu.screen_recorder import FrameRing, ScreenRecorder


def png(label: str, size: tuple[int, int] = (160, 120)) -> bytes:
    image = Image.new("RGB", size, "black")
    ImageDraw.Draw(image).text((10, 10), label, fill="white")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


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
