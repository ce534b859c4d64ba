"""Find a template image on the screen: NumPy normalised cross-correlation.

::

    box = find(Image.open("ok_button.png"), guest.screenshot(), threshold=0.9)
    box = guest.wait_for_image("ok_button.png", timeout=20)     # waits, see below
    guest.click(*box.center)

The score is the zero-mean normalised cross-correlation (OpenCV's
``TM_CCOEFF_NORMED``) on grey levels: 1.0 is a perfect match, insensitive to
brightness and contrast changes. The correlation runs as one FFT product and
the window energies come from integral images, so a 1024x768 screen costs a few
tens of milliseconds whatever the template size. Why not OpenCV: docs/gui.md.

numpy is an optional dependency (the ``match`` extra, also part of ``gui``): this
module imports it on first use, so the guest facade can import :class:`Box` and
:func:`wait_for_image` without it. Matching without numpy raises
:class:`ModuleNotFoundError` saying ``pip install 'pytest-adare[match]'``.

:func:`wait_for_image` re-checks when the screen may have changed
(:func:`pytest_adare.screen.wait.watch_screen`: at once after a GUI event of the
agent, otherwise with a short backoff that restarts whenever the screen moved). On timeout
:class:`ImageNotFound` names the best score seen and a saved copy of the last
screenshot.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from PIL import Image, ImageDraw

from pytest_adare.errors import AdareError
from pytest_adare.screen.wait import (
    EventSource,
    OnScreen,
    Region,
    Screenshot,
    check_pick,
    check_region,
    pick,
    save_screenshot,
    watch_screen,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    GreyArray = npt.NDArray[np.float64]

__all__ = [
    "Box",
    "ImageNotFound",
    "ImageStillShown",
    "ImageWaitTimeout",
    "Needle",
    "NeedleError",
    "Region",
    "TemplateMatcher",
    "find",
    "wait_for_image",
    "wait_for_image_gone",
]

ImageLike = Union[Image.Image, "npt.NDArray[Any]", str, "os.PathLike[str]"]
MATCH_EXTRA_HINT = "pip install 'pytest-adare[match]'"

_MIN_VARIANCE = 0.25  # per pixel: flatter windows (no contrast) score 0, not noise


@dataclass(frozen=True)
class Box(OnScreen):
    """Where a template matched: top-left ``x, y``, size, and the score in [-1, 1]."""

    x: int
    y: int
    width: int
    height: int
    score: float


class NeedleError(AdareError, ValueError):
    """A needle's JSON sidecar is unreadable or describes areas that make no sense."""


NEEDLE_KEYS = frozenset({"match", "exclude", "threshold", "click"})


@dataclass(frozen=True)
class Needle:
    """A template PNG and what of it must match: ``Needle.load("needles/ok.png")``.

    The optional JSON sidecar (``ok.json`` beside ``ok.png``) holds, in the PNG's pixels::

        {"match": [[x, y, width, height], ...],     # areas that must match (default: all)
         "exclude": [[x, y, width, height], ...],   # areas inside them to ignore
         "threshold": 0.9,                          # default 0.9
         "click": [x, y]}                           # default: the centre of the match areas

    The template is the bounding box of the match areas; only their pixels outside every
    exclude area are compared, so a clock or a cursor inside an exclude area cannot
    spoil the match. Areas may also be written ``{"x": .., "y": .., "width": ..,
    "height": ..}``.
    """

    image: Image.Image
    match: tuple[Region, ...] = ()
    exclude: tuple[Region, ...] = ()
    threshold: float = 0.9
    click: tuple[int, int] | None = None
    source: str = "needle"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Needle:
        """The PNG at ``path`` and, when it exists, its ``.json`` sidecar.

        :raise NeedleError: the sidecar is not valid JSON or describes bad areas.
        :raise OSError: the PNG cannot be read.
        """
        png = Path(path)
        with Image.open(png) as opened:
            image = opened.copy()
        sidecar = png.with_suffix(".json")
        if not sidecar.is_file():
            return cls(image, source=str(png))
        try:
            spec = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise NeedleError(f"needle sidecar {sidecar}: not readable JSON ({error})") from None
        return cls.from_spec(image, spec, str(sidecar))

    @classmethod
    def from_spec(cls, image: Image.Image, spec: object, source: str = "needle") -> Needle:
        """A needle from the sidecar's parsed JSON (validated against ``image``).

        :raise NeedleError: naming ``source`` and what is wrong.
        """
        if not isinstance(spec, dict):
            raise NeedleError(f"{source}: expected a JSON object, got {type(spec).__name__}")
        unknown = sorted(set(spec) - NEEDLE_KEYS)
        if unknown:
            raise NeedleError(
                f"{source}: unknown key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(NEEDLE_KEYS))}"
            )
        match = tuple(
            _area(a, image, f"{source} match[{i}]") for i, a in enumerate(spec.get("match", []))
        )
        exclude = tuple(
            _area(a, image, f"{source} exclude[{i}]") for i, a in enumerate(spec.get("exclude", []))
        )
        threshold = spec.get("threshold", 0.9)
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not (0 < threshold <= 1)
        ):
            raise NeedleError(f"{source}: threshold must be a number in (0, 1], got {threshold!r}")
        click = spec.get("click")
        if click is not None:
            if not (
                isinstance(click, list)
                and len(click) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in click)
                and 0 <= click[0] < image.width
                and 0 <= click[1] < image.height
            ):
                raise NeedleError(f"{source}: click must be [x, y] inside the image, got {click!r}")
            click = (click[0], click[1])
        return cls(image, match, exclude, float(threshold), click, source)

    @property
    def bounds(self) -> Region:
        """The part of the image compared: the bounding box of the match areas."""
        if not self.match:
            return 0, 0, self.image.width, self.image.height
        left = min(a[0] for a in self.match)
        top = min(a[1] for a in self.match)
        right = max(a[0] + a[2] for a in self.match)
        bottom = max(a[1] + a[3] for a in self.match)
        return left, top, right - left, bottom - top

    def click_offset(self) -> tuple[int, int]:
        """Where to click, relative to the top-left of :attr:`bounds`."""
        left, top, width, height = self.bounds
        if self.click is None:
            return width // 2, height // 2
        return self.click[0] - left, self.click[1] - top

    def template_and_mask(self) -> tuple[Image.Image, Image.Image | None]:
        """The cropped template and, when areas restrict it, a mask of the pixels that
        count (mode ``L``: 255 compared, 0 ignored); None when every pixel counts."""
        left, top, width, height = self.bounds
        template = self.image.crop((left, top, left + width, top + height))
        if not self.exclude and len(self.match) <= 1:
            return template, None
        mask = Image.new("L", (width, height), 0 if self.match else 255)
        draw = ImageDraw.Draw(mask)
        for areas, fill in ((self.match, 255), (self.exclude, 0)):
            for x, y, w, h in areas:
                draw.rectangle((x - left, y - top, x - left + w - 1, y - top + h - 1), fill=fill)
        return template, mask


def _area(value: object, image: Image.Image, where: str) -> Region:
    if isinstance(value, dict) and set(value) == {"x", "y", "width", "height"}:
        value = [value["x"], value["y"], value["width"], value["height"]]
    if not (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise NeedleError(f"{where}: expected [x, y, width, height] in pixels, got {value!r}")
    try:
        return check_region((value[0], value[1], value[2], value[3]), image.size)
    except ValueError:
        raise NeedleError(
            f"{where}: {value} is not inside the {image.width}x{image.height} needle image"
        ) from None


class ImageWaitTimeout(AdareError, TimeoutError):
    """A wait on a template ran out; ``screenshot_path`` holds the last screen."""

    def __init__(self, message: str, screenshot: Image.Image | None, screenshot_path: Path | None):
        self.screenshot = screenshot
        self.screenshot_path = screenshot_path
        super().__init__(message)


class ImageNotFound(ImageWaitTimeout):
    """The template did not show within the timeout."""


class ImageStillShown(ImageWaitTimeout):
    """The template was still on the screen when a wait for it to go ran out."""


def require_numpy() -> None:
    """Check that numpy, which template matching needs, is installed.

    :raise ModuleNotFoundError: numpy is missing; the message names the extra to install.
    """
    try:
        # Deferred: numpy is an optional extra; only template matching needs it.
        import numpy  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "numpy":
            raise
        raise ModuleNotFoundError(
            f"template matching needs numpy, which is not installed: {MATCH_EXTRA_HINT} "
            "(the gui extra includes it)",
            name="numpy",
        ) from None


def to_grey(image: ImageLike) -> GreyArray:
    """A 2-D float64 array of grey levels (0-255) from a PIL image, array or file path.

    :raise ModuleNotFoundError: numpy is not installed (the ``match`` extra).
    """
    require_numpy()
    # Deferred: numpy is an optional extra, checked just above.
    import numpy as np

    if isinstance(image, (str, os.PathLike)):
        with Image.open(image) as opened:
            return to_grey(opened.copy())
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("L"), dtype=np.float64)
    array = np.asarray(image, dtype=np.float64)
    if array.ndim == 3 and array.shape[2] in (3, 4):
        array = array[:, :, :3] @ np.array([0.299, 0.587, 0.114])  # ITU-R 601, like PIL "L"
    if array.ndim != 2:
        raise ValueError(f"expected an image or a 2-D/3-D array, got shape {array.shape}")
    return array


def _window_sums(integral: GreyArray, height: int, width: int) -> GreyArray:
    """Sums over every ``height x width`` window from a zero-padded integral image."""
    return (
        integral[height:, width:]
        - integral[:-height, width:]
        - integral[height:, :-width]
        + integral[:-height, :-width]
    )


def _integral(array: GreyArray) -> GreyArray:
    # Deferred: numpy is an optional extra; to_grey checked it before any array exists.
    import numpy as np

    padded = np.zeros((array.shape[0] + 1, array.shape[1] + 1))
    padded[1:, 1:] = array.cumsum(0).cumsum(1)
    return padded


class TemplateMatcher:
    """A template prepared once for many screens (its FFT is cached per screen size).

    ``template`` is an image, an array, a PNG path (its JSON sidecar, if any, makes it a
    :class:`Needle`) or a :class:`Needle`; a needle's mask leaves its exclude areas out
    of the score.
    """

    def __init__(self, template: ImageLike | Needle) -> None:
        if isinstance(template, (str, os.PathLike)):
            template = Needle.load(template)
        self.needle = template if isinstance(template, Needle) else None
        mask_image = None
        if isinstance(template, Needle):
            template, mask_image = template.template_and_mask()
        grey = to_grey(template)
        self.height, self.width = grey.shape
        if self.height == 0 or self.width == 0:
            raise ValueError("the template is empty")
        self._mask = None if mask_image is None else (to_grey(mask_image) > 127).astype(float)
        weights = self._mask if self._mask is not None else 1.0
        self._count = float(self._mask.sum()) if self._mask is not None else float(grey.size)
        if self._count == 0:
            raise ValueError("the needle's exclude areas leave nothing of its match areas")
        mean = float((grey * weights).sum()) / self._count
        self._zero_mean = (grey - mean) * weights
        self._energy = float((self._zero_mean**2).sum())
        if self._energy < _MIN_VARIANCE * self._count:
            raise ValueError(
                "the template has no contrast (one flat colour); cut one with some detail"
            )
        self._spectra: dict[tuple[str, int, int], npt.NDArray[np.complex128]] = {}

    @property
    def threshold(self) -> float:
        """The needle's threshold, else 0.9."""
        return self.needle.threshold if self.needle is not None else 0.9

    @property
    def click_offset(self) -> tuple[int, int]:
        """Where to click relative to a found box's top-left (the needle's click point)."""
        if self.needle is not None:
            return self.needle.click_offset()
        return self.width // 2, self.height // 2

    def _correlate(
        self,
        screen_spectrum: npt.NDArray[np.complex128],
        name: str,
        kernel: GreyArray,
        shape: tuple[int, int],
    ) -> GreyArray:
        """``sum(screen window * kernel)`` at every position where the kernel fits."""
        # Deferred: numpy is an optional extra; to_grey checked it when the template loaded.
        import numpy as np

        key = (name, *shape)
        if key not in self._spectra:
            self._spectra[key] = np.fft.rfft2(kernel[::-1, ::-1], s=shape)
        full = np.fft.irfft2(screen_spectrum * self._spectra[key], s=shape)
        return full[self.height - 1 :, self.width - 1 :]

    def scores(self, screen: GreyArray) -> GreyArray:
        """The score of every position where the template fits inside ``screen``."""
        # Deferred: numpy is an optional extra; to_grey checked it when the template loaded.
        import numpy as np

        rows, cols = screen.shape
        if rows < self.height or cols < self.width:
            raise ValueError(
                f"the template ({self.width}x{self.height}) is larger than the searched "
                f"area ({cols}x{rows})"
            )
        shape = (rows, cols)
        spectrum = np.fft.rfft2(screen)
        numerator = self._correlate(spectrum, "template", self._zero_mean, shape)
        if self._mask is None:
            sums = _window_sums(_integral(screen), self.height, self.width)
            squares = _window_sums(_integral(screen**2), self.height, self.width)
        else:
            sums = self._correlate(spectrum, "mask", self._mask, shape)
            squares = self._correlate(np.fft.rfft2(screen**2), "mask", self._mask, shape)
        variance = np.maximum(squares - sums**2 / self._count, 0.0)
        flat = variance < _MIN_VARIANCE * self._count
        denominator = np.sqrt(np.where(flat, 1.0, variance) * self._energy)
        return np.where(flat, 0.0, np.clip(numerator / denominator, -1.0, 1.0))

    def best(self, screen: ImageLike, region: Region | None = None) -> Box:
        """The best-scoring box on ``screen`` (within ``region`` = x, y, width, height)."""
        # Deferred: numpy is an optional extra; to_grey checked it when the template loaded.
        import numpy as np

        grey = to_grey(screen)
        left, top = 0, 0
        if region is not None:
            left, top, width, height = check_region(region, (grey.shape[1], grey.shape[0]))
            grey = grey[top : top + height, left : left + width]
        scores = self.scores(grey)
        row, col = np.unravel_index(int(np.argmax(scores)), scores.shape)
        return Box(
            left + int(col), top + int(row), self.width, self.height, float(scores[row, col])
        )

    def all(
        self, screen: ImageLike, region: Region | None = None, threshold: float | None = None
    ) -> list[Box]:
        """Every place the template scores at least ``threshold`` (default
        :attr:`threshold`), one box per place, in reading order (rows top to bottom,
        each left to right); at most :data:`MAX_MATCHES`."""
        # Deferred: numpy is an optional extra; to_grey checked it when the template loaded.
        import numpy as np

        wanted = self.threshold if threshold is None else threshold
        grey = to_grey(screen)
        left, top = 0, 0
        if region is not None:
            left, top, width, height = check_region(region, (grey.shape[1], grey.shape[0]))
            grey = grey[top : top + height, left : left + width]
        scores = self.scores(grey)
        # A match is a peak: the positions a pixel or two beside it score nearly as
        # high. Best first, a position is kept only when it overlaps no kept box by
        # half the template (non-maximum suppression); the candidates are capped so a
        # screen of look-alikes costs bounded time.
        candidates = np.flatnonzero(scores >= wanted)
        if candidates.size > MAX_CANDIDATES:
            top_scores = np.argpartition(-scores.ravel()[candidates], MAX_CANDIDATES)
            candidates = candidates[top_scores[:MAX_CANDIDATES]]
        order = candidates[np.argsort(-scores.ravel()[candidates], kind="stable")]
        kept: list[Box] = []
        for flat in order:
            row, col = divmod(int(flat), scores.shape[1])
            box = Box(left + col, top + row, self.width, self.height, float(scores[row, col]))
            if not any(_overlaps(box, other) for other in kept):
                kept.append(box)
                if len(kept) == MAX_MATCHES:
                    break
        rows: list[list[Box]] = []
        for box in sorted(kept, key=lambda b: b.y):
            for line in rows:
                if abs(line[0].y - box.y) < self.height // 2 + 1:
                    line.append(box)
                    break
            else:
                rows.append([box])
        return [box for line in rows for box in sorted(line, key=lambda b: b.x)]


MAX_MATCHES = 100
""":meth:`TemplateMatcher.all` returns at most this many places."""
MAX_CANDIDATES = 20_000


def _overlaps(a: Box, b: Box) -> bool:
    width = min(a.x + a.width, b.x + b.width) - max(a.x, b.x)
    height = min(a.y + a.height, b.y + b.height) - max(a.y, b.y)
    return width > 0 and height > 0 and 2 * width * height >= a.width * a.height


Template = ImageLike | Needle | TemplateMatcher


def matcher_for(template: Template) -> TemplateMatcher:
    """``template`` prepared for matching (a matcher is used as it is)."""
    return template if isinstance(template, TemplateMatcher) else TemplateMatcher(template)


def find(
    template: Template,
    screenshot: ImageLike,
    region: Region | None = None,
    threshold: float | None = None,
) -> Box | None:
    """The best match of ``template`` on ``screenshot`` if its score reaches ``threshold``
    (default: the needle's, else 0.9)."""
    matcher = matcher_for(template)
    box = matcher.best(screenshot, region)
    return box if box.score >= (matcher.threshold if threshold is None else threshold) else None


async def wait_for_image(
    screenshot_fn: Screenshot,
    template: Template,
    timeout: float = 10.0,
    region: Region | None = None,
    threshold: float | None = None,
    events: EventSource | None = None,
    *,
    index: int = 1,
    near: tuple[int, int] | None = None,
) -> Box:
    """Take screenshots until ``template`` shows (score >= ``threshold``, default the
    needle's, else 0.9); return its box: the best match, or with ``index``/``near``
    the ``index``-th in reading order / closest to ``near`` (see
    :func:`~pytest_adare.screen.wait.pick`). Screens are taken as
    :func:`~pytest_adare.screen.wait.watch_screen` says.

    :raise ImageNotFound: after ``timeout`` seconds, with the best score seen and the
        last screenshot saved to a temporary PNG named in the message.
    """
    matcher = matcher_for(template)
    wanted = matcher.threshold if threshold is None else threshold
    check_pick(index, near)
    best: list[Box] = []

    def check(screen: Image.Image) -> Box | None:
        box = matcher.best(screen, region)
        if not best or box.score > best[0].score:
            best[:] = [box]
        if box.score < wanted:
            return None
        if index == 1 and near is None:
            return box
        return pick(matcher.all(screen, region, wanted), index, near)

    watched = await watch_screen(screenshot_fn, check, timeout, events)
    if watched.result is not None:
        return watched.result
    path = save_screenshot(watched.screen, "adare-wait-for-image-")
    top = best[0] if best else None
    seen = f"best score {top.score:.3f} at ({top.x}, {top.y})" if top else "no screen checked"
    number = "" if index == 1 else f" (match number {index})"
    raise ImageNotFound(
        f"template ({matcher.width}x{matcher.height}){number} not found on screen within "
        f"{timeout:.1f} s ({seen}, threshold {wanted}; {watched.checked} distinct screens "
        f"checked); last screenshot saved to {path}",
        watched.screen,
        path,
    )


async def wait_for_image_gone(
    screenshot_fn: Screenshot,
    template: Template,
    timeout: float = 10.0,
    region: Region | None = None,
    threshold: float | None = None,
    events: EventSource | None = None,
) -> None:
    """Take screenshots until ``template`` no longer shows (its best score stays below
    ``threshold``).

    :raise ImageStillShown: after ``timeout`` seconds, naming where it still was.
    """
    matcher = matcher_for(template)
    wanted = matcher.threshold if threshold is None else threshold
    last: list[Box] = []

    def check(screen: Image.Image) -> bool | None:
        last[:] = [matcher.best(screen, region)]
        return True if last[0].score < wanted else None

    watched = await watch_screen(screenshot_fn, check, timeout, events)
    if watched.result is not None:
        return
    path = save_screenshot(watched.screen, "adare-wait-for-image-")
    box = last[0] if last else None
    where = f"at ({box.x}, {box.y}), score {box.score:.3f}" if box else "(no screen checked)"
    raise ImageStillShown(
        f"template ({matcher.width}x{matcher.height}) still on screen after {timeout:.1f} s "
        f"{where} (threshold {wanted}; {watched.checked} distinct screens checked); last "
        f"screenshot saved to {path}",
        watched.screen,
        path,
    )
