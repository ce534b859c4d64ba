"""A film of the guest's screen: the last seconds of screendumps, kept in bounded memory.

::

    recorder = ScreenRecorder(lambda: vm.machine, fps=2, seconds=20)
    await recorder.start()            # a task on the running loop (the VM's loop)
    ...                               # the test runs
    await recorder.stop()
    recorder.save_film(folder / "recording.webp")   # animated WebP (GIF: ".gif")

A background task asks the machine for a PNG screendump ``fps`` times a second (no work in the
guest: QEMU renders its own display) and keeps only frames that differ from the one
before, each with the time it appeared, in a :class:`FrameRing` bounded by frame count,
bytes and seconds. A change that fits in :data:`STILL_BOX` (a blinking cursor, a clock's
digit) is no new frame: a screen whose cursor blinks is one frame, not one per blink.
A frame is kept as QEMU's PNG bytes (a few tens of KiB for a desktop); the newest one is
held decoded too, to compare the next screendump with, off the loop (a thread).
Screendumps that fail (the VM died or is being restored) are skipped and counted; the
film shows what was captured.

This module knows nothing of pytest: the plugin starts and stops one recorder per VM
around each test's call phase and writes the film of a failing one (see
``plugin/recording.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PIL import Image, ImageChops

DEFAULT_FPS = 2.0
DEFAULT_SECONDS = 20.0
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
SCREENDUMP_TIMEOUT = 10.0
FILM_MAX_PIXELS = 1_310_720
"""Film frames larger than 1280x1024 are scaled down: a film decodes all its frames."""
MIN_FRAME_MS = 20  # animated WebP/GIF players round shorter frames up anyway
STILL_BOX = (32, 32)
"""Width and height in pixels of the largest change that makes no new frame: more than a
text cursor (a VGA cell is 9x16, xterm's 6x13, a GUI's caret 1-2 px wide) or a clock's
digit, less than a word typed or a window opened. A film may lack a change this small;
the failure's screenshot has the exact last screen."""


@dataclass(frozen=True)
class Frame:
    """One distinct screen: when it appeared (monotonic seconds) and QEMU's PNG."""

    at: float
    png: bytes
    digest: bytes


class FrameRing:
    """The distinct frames of the last ``max_seconds``: at most ``max_frames`` of them and
    ``max_bytes`` of PNG in all (the oldest go first).

    A frame that equals the newest, or differs from it only within ``still_box`` (width,
    height), is not stored: it only moves :attr:`last_seen`, so a still screen costs
    nothing, blinking cursor included. The comparison is with the newest *stored* frame,
    so small changes that add up (a word typed letter by letter) make a frame once they
    outgrow the box. The oldest frame is kept while the one after it appeared within the
    window: the film then starts with what the screen showed at its start.
    """

    def __init__(
        self,
        max_frames: int,
        max_seconds: float,
        max_bytes: int,
        still_box: tuple[int, int] = STILL_BOX,
    ) -> None:
        if max_frames < 1 or max_seconds <= 0 or max_bytes < 1:
            raise ValueError("a frame ring needs room for at least one frame, second and byte")
        self.max_frames = max_frames
        self.max_seconds = max_seconds
        self.max_bytes = max_bytes
        self.still_box = still_box
        self._frames: deque[Frame] = deque()
        self._bytes = 0
        self._decoded: tuple[bytes, Image.Image] | None = None  # (digest, the newest frame)
        self.last_seen = 0.0
        """When the newest frame was last seen on screen (it shows until then)."""

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def size(self) -> int:
        """PNG bytes held."""
        return self._bytes

    def add(self, at: float, png: bytes) -> bool:
        """Record the screen seen at ``at``; True when it differs from the newest frame."""
        digest = hashlib.blake2b(png, digest_size=16).digest()
        self.last_seen = at
        if self._frames and (self._frames[-1].digest == digest or self._still(digest, png)):
            self._evict(at)
            return False
        self._frames.append(Frame(at, png, digest))
        self._bytes += len(png)
        self._evict(at)
        return True

    def _still(self, digest: bytes, png: bytes) -> bool:
        """Whether ``png`` differs from the newest frame only within :attr:`still_box`;
        ``png`` decoded is kept as the newest frame's image either way."""
        newest = self._frames[-1]
        try:
            if self._decoded is None or self._decoded[0] != newest.digest:
                self._decoded = (newest.digest, _decode(newest.png))
            image = _decode(png)
        except (OSError, ValueError):  # not a PNG PIL reads: a change, as before
            return False
        before = self._decoded[1]
        self._decoded = (digest, image)
        if image.size != before.size:
            return False
        box = ImageChops.difference(image, before).getbbox()
        if box is None:  # the same pixels, encoded differently
            return True
        width, height = self.still_box
        return box[2] - box[0] <= width and box[3] - box[1] <= height

    def _evict(self, now: float) -> None:
        frames = self._frames
        while len(frames) > 1 and (
            len(frames) > self.max_frames
            or self._bytes > self.max_bytes
            or frames[1].at <= now - self.max_seconds
        ):
            self._bytes -= len(frames.popleft().png)
        if frames and self._bytes > self.max_bytes:  # one frame larger than the budget
            self._bytes -= len(frames.popleft().png)

    def frames(self) -> list[Frame]:
        """The frames held, oldest first."""
        return list(self._frames)

    def durations_ms(self) -> list[int]:
        """How long each frame showed, in ms (the newest: until :attr:`last_seen`)."""
        frames = list(self._frames)
        if not frames:
            return []
        ends = [f.at for f in frames[1:]] + [max(self.last_seen, frames[-1].at)]
        return [
            max(MIN_FRAME_MS, round((end - f.at) * 1000))
            for f, end in zip(frames, ends, strict=True)
        ]


def _decode(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")


def _film_frame(png: bytes) -> Image.Image:
    """One decoded frame, scaled down to :data:`FILM_MAX_PIXELS` (all are held at once)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = image.width * image.height
    if pixels > FILM_MAX_PIXELS:
        factor = (FILM_MAX_PIXELS / pixels) ** 0.5
        size = (max(1, int(image.width * factor)), max(1, int(image.height * factor)))
        image = image.resize(size, Image.Resampling.BILINEAR)
    return image


class ScreendumpMachine(Protocol):
    """What the recorder needs of a machine (any backend's ``ascreendump_png``)."""

    async def ascreendump_png(self, timeout: float = 30.0) -> bytes: ...


class ScreenRecorder:
    """Keeps the last ``seconds`` of the screen at ``fps`` (see the module docstring).

    ``machine`` is called for every frame, so a VM that restarts its QEMU (``reboot``)
    keeps being recorded.
    """

    def __init__(
        self,
        machine: Callable[[], ScreendumpMachine],
        *,
        fps: float = DEFAULT_FPS,
        seconds: float = DEFAULT_SECONDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not 0 < fps <= 10:
            raise ValueError(f"fps must be in (0, 10], got {fps}")
        self._machine = machine
        self.interval = 1.0 / fps
        self.ring = FrameRing(max(1, round(fps * seconds)) + 1, seconds, max_bytes)
        self.captured = 0
        self.failed = 0
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start recording on the running loop (the machine's); a no-op when running."""
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(self._record())

    async def stop(self) -> None:
        """Stop recording; the frames stay for :meth:`save_film`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _record(self) -> None:
        next_at = time.monotonic()
        while True:
            try:
                png = await self._machine().ascreendump_png(SCREENDUMP_TIMEOUT)
                await self._add(time.monotonic(), png)
                self.captured += 1
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a dead or restoring VM: skip the frame, keep going
                self.failed += 1
                self.last_error = f"{type(error).__name__}: {error}".splitlines()[0]
            next_at = max(next_at + self.interval, time.monotonic())
            await asyncio.sleep(next_at - time.monotonic())

    async def _add(self, at: float, png: bytes) -> None:
        # A thread: comparing with the newest frame decodes PNGs (ms each), and this loop
        # also carries every agent call. Cancelled (stop), it still waits for the thread,
        # so no frame lands in the ring after stop() returned.
        adding = asyncio.get_running_loop().run_in_executor(None, self.ring.add, at, png)
        try:
            await asyncio.shield(adding)
        except asyncio.CancelledError:
            await adding
            raise

    def save_film(self, path: str | os.PathLike[str]) -> Path | None:
        """Write the frames as an animated WebP (or GIF when ``path`` ends in ``.gif``),
        each shown as long as it was on screen; None when nothing was captured."""
        frames = self.ring.frames()
        if not frames:
            return None
        target = Path(path)
        images = [_film_frame(frame.png) for frame in frames]
        durations = self.ring.durations_ms()
        if target.suffix.lower() == ".gif":
            options: dict[str, Any] = {"format": "GIF", "optimize": False}
        else:
            options = {"format": "WEBP", "quality": 60, "method": 0}
        images[0].save(
            target,
            save_all=True,
            append_images=images[1:],
            duration=durations,
            loop=0,
            **options,
        )
        return target

    def describe(self) -> str:
        """One line for reports: frames kept, span, captures and failures."""
        frames = self.ring.frames()
        span = (self.ring.last_seen - frames[0].at) if frames else 0.0
        failed = f", {self.failed} failed ({self.last_error})" if self.failed else ""
        return (
            f"{len(frames)} distinct frames over the last {span:.1f} s "
            f"({self.captured} screendumps at {1 / self.interval:g} fps{failed})"
        )
