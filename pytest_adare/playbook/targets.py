"""Where a playbook's ``target`` is on a screenshot: text (OCR), needle image, position.

Every place the target is found is a :class:`Candidate`; the ``strategy`` picks one
(adare's: sweep index, best confidence, closest to a point/text/image within
``max_distance``, a corner, largest, smallest), and ``offset`` moves the point from
one of the box's nine bases. Text targets read the screen with the host's OCR
(:mod:`pytest_adare.screen.text`), with ``text_match`` modes substring, regex and
fuzzy (OCR misreads as edits); needles are PNGs in the experiment's ``img/``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image


class TargetProblem(ValueError):
    """The target cannot be looked for as written (a missing needle, a bad regex)."""


@dataclass(frozen=True)
class Candidate:
    x: int
    y: int
    width: int
    height: int
    confidence: float

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.width // 2, self.y + self.height // 2


REGEX_FLAGS = {"IGNORECASE": re.IGNORECASE, "MULTILINE": re.MULTILINE, "DOTALL": re.DOTALL,
               "VERBOSE": re.VERBOSE}  # fmt: skip


def text_query(text: str, match: Mapping[str, Any] | None) -> Any:
    """The :class:`~pytest_adare.screen.text.TextQuery` for a text target."""
    # Deferred: OCR only for GUI playbooks
    from pytest_adare.screen.text import TextQuery

    options = dict(match or {})
    mode = options.get("mode", "substring")
    ignore_case = not options.get("case_sensitive", False)
    if mode == "substring":
        return TextQuery(text, ignore_case=ignore_case)
    if mode == "regex":
        flags = re.IGNORECASE if ignore_case else 0
        for name in options.get("flags") or []:
            if name not in REGEX_FLAGS:
                raise TargetProblem(f"text_match.flags: unknown flag {name!r}")
            flags |= REGEX_FLAGS[name]
        try:
            return TextQuery(re.compile(text, flags), ignore_case=False)
        except re.error as error:
            raise TargetProblem(f"text: bad regex {text!r}: {error}") from None
    if mode == "fuzzy":
        distance = options.get("max_missing")
        similarity = options.get("min_similarity")
        if distance is None and similarity is not None:
            distance = math.floor(len(text) * (1.0 - float(similarity)))
        if distance is None:
            distance = 1 if options.get("allow_missing_chars") else 0
        try:
            return TextQuery(text, ignore_case=ignore_case, max_distance=int(distance))
        except ValueError as error:
            raise TargetProblem(f"text_match: {error}") from None
    raise TargetProblem(f"text_match.mode {mode!r} is not supported by pytest-adare")


def needle_path(folder: Path, name: str) -> Path:
    """The needle PNG ``name`` of the experiment (``img/NAME`` or a path in it).

    :raise TargetProblem: no such file, or a path out of the experiment's folder.
    """
    for candidate in (folder / "img" / name, folder / name):
        resolved = candidate.resolve()
        if resolved.is_file() and resolved.is_relative_to(folder.resolve()):
            return resolved
    raise TargetProblem(f"needle image {name!r} not found in {folder / 'img'}")


def find_candidates(
    target: Mapping[str, Any], screen: Image.Image, folder: Path
) -> list[Candidate]:
    """Every place ``target`` is on ``screen``, in reading order."""
    if "position" in target:
        x, y = target["position"]
        return [Candidate(int(x), int(y), 0, 0, 1.0)]
    if "text" in target:
        # Deferred: OCR is heavy
        from pytest_adare.screen.text import find_text

        query = text_query(str(target["text"]), target.get("text_match"))
        return [
            Candidate(m.x, m.y, m.width, m.height, m.confidence)
            for m in find_text(query, screen, None)
        ]
    # Deferred: numpy
    from pytest_adare.screen.match import TemplateMatcher

    matcher = TemplateMatcher(needle_path(folder, str(target["image"])))
    return [Candidate(b.x, b.y, b.width, b.height, b.score) for b in matcher.all(screen)]


def choose(
    candidates: Sequence[Candidate],
    strategy: Mapping[str, Any] | None,
    locate: Callable[[Mapping[str, Any]], list[Candidate]],
) -> Candidate | None:
    """The candidate ``strategy`` picks (default: the first in reading order).

    ``locate`` finds a reference target (``ClosestToStrategy`` text/image).
    """
    if not candidates:
        return None
    if not strategy:
        return candidates[0]
    ((name, options),) = strategy.items()
    options = options or {}
    if name == "SweepStrategy":
        index = int(options.get("index", 1))
        return candidates[index - 1] if 1 <= index <= len(candidates) else None
    if name == "BestConfidenceStrategy":
        return max(candidates, key=lambda c: c.confidence)
    if name == "LargestStrategy":
        return max(candidates, key=lambda c: c.width * c.height)
    if name == "SmallestStrategy":
        return min(candidates, key=lambda c: c.width * c.height)
    corners = {
        "TopLeftStrategy": lambda c: (c.y, c.x),
        "TopRightStrategy": lambda c: (c.y, -c.x),
        "BottomLeftStrategy": lambda c: (-c.y, c.x),
        "BottomRightStrategy": lambda c: (-c.y, -c.x),
    }
    if name in corners:
        return min(candidates, key=corners[name])
    # ClosestToStrategy: to a point, or to where another text or image is.
    if "x" in options:
        point = (int(options["x"]), int(options["y"]))
    else:
        reference = {"text": options["text"]} if "text" in options else {"image": options["image"]}
        found = locate(reference)
        if not found:
            return None
        point = found[0].center
    limit = options.get("max_distance")

    def distance(candidate: Candidate) -> float:
        cx, cy = candidate.center
        return math.hypot(cx - point[0], cy - point[1])

    best = min(candidates, key=distance)
    return None if limit is not None and distance(best) > limit else best


def point_of(candidate: Candidate, offset: Mapping[str, Any] | None) -> tuple[int, int]:
    """The point to act on: the box's ``offset.base`` (default center) plus x/y."""
    options = dict(offset or {})
    base = str(options.get("base", "center"))
    vertical, _, horizontal = base.partition("-") if base != "center" else ("center", "", "center")
    if base in ("center-left", "center-right"):
        vertical, horizontal = "center", base.split("-")[1]
    if base in ("top-center", "bottom-center"):
        vertical, horizontal = base.split("-")[0], "center"
    xs = {"left": candidate.x, "center": candidate.center[0],
          "right": candidate.x + candidate.width}  # fmt: skip
    ys = {"top": candidate.y, "center": candidate.center[1],
          "bottom": candidate.y + candidate.height}  # fmt: skip
    return xs[horizontal] + int(options.get("x", 0)), ys[vertical] + int(options.get("y", 0))
