"""Helpers shared by the stock collections: paths, reading, key paths, comparisons, counts.

Every helper ends the test itself when the check cannot go on: a missing file
is FAILED (what the check looks for is not there), anything that prevents the
check (bad parameter, unreadable file) is ERROR.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from adare_guest.placeholders import Comparison, has_placeholders
from adare_guest.testfunctions import TestContext, TestError

_GLOB_CHARS = frozenset("*?[]")
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
_STEP = re.compile(r"^(?P<key>[^\[\]]*)(?P<index>(\[(\*|-?\d+)\])*)$")
SNIPPET = 200


def snippet(value: object) -> str:
    """``repr`` of ``value``, cut to a readable length."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= SNIPPET:
        return repr(text) if isinstance(value, str) else text
    return f"{text[:SNIPPET]!r}... ({len(text)} chars)"


def paths(ctx: TestContext, dst: str, match_mode: str = "single") -> list[str]:
    """``dst`` itself, or what its glob matches (``single``: exactly one, ``any``: 0 or more)."""
    ctx.error_if(not dst, "dst (the path to check) is empty")
    ctx.error_if(
        match_mode not in ("single", "any"), f"match_mode must be single or any, not {match_mode!r}"
    )
    if not _GLOB_CHARS.intersection(dst):
        return [dst]
    found = sorted(glob.glob(dst))
    if match_mode == "single":
        ctx.error_if(not found, f"no path matches the glob {dst!r}")
        ctx.error_if(len(found) > 1, f"{len(found)} paths match the glob {dst!r}: {found[:5]}")
    return found


def one_path(ctx: TestContext, dst: str) -> str:
    """The one path ``dst`` names (a glob must match exactly one)."""
    return paths(ctx, dst, "single")[0]


def must_exist(ctx: TestContext, path: str, what: str = "file") -> None:
    """FAILED when ``path`` is missing, ERROR when it is a directory and a file was asked for."""
    ctx.fail_if(not os.path.exists(path), f"{what} {path} does not exist")
    if what != "directory":
        ctx.error_if(os.path.isdir(path), f"{path} is a directory, not a {what}")


def read_bytes(ctx: TestContext, path: str) -> bytes:
    """The file's bytes (missing: FAILED, unreadable: ERROR)."""
    must_exist(ctx, path)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise TestError(f"cannot read {path}: {exc}") from None


def read_text(ctx: TestContext, path: str, encoding: str = "utf-8", strip_bom: bool = False) -> str:
    """The file as text. ``encoding="BOM"`` takes the encoding from the byte-order mark."""
    data = read_bytes(ctx, path)
    if encoding.upper() == "BOM":
        detected = next((enc for bom, enc in _BOMS if data.startswith(bom)), None)
        ctx.error_if(detected is None, f"{path} has no byte-order mark to take the encoding from")
        assert detected is not None
        encoding = detected
    try:
        text = data.decode(encoding)
    except (LookupError, UnicodeDecodeError) as exc:
        raise TestError(f"cannot decode {path} as {encoding}: {exc}") from None
    return text[1:] if strip_bom and text.startswith("\ufeff") else text


def load_json(ctx: TestContext, path: str) -> Any:
    """The parsed JSON document (invalid JSON: FAILED, as the file is not what was expected)."""
    text = read_text(ctx, path, "utf-8-sig")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        ctx.fail(f"{path} is not valid JSON: {exc}")


def key_path_values(data: Any, key_path: str) -> list[Any]:
    """Values at a dot path: ``a.b``, ``a.*`` (every value), ``a[*]`` (every item), ``a[0]``.

    Returns every value found (several for wildcards); ``[]`` when nothing is there.
    ``$`` or an empty path is the document itself.

    >>> key_path_values({"u": [{"n": 1}, {"n": 2}]}, "u[*].n")
    [1, 2]
    """
    if key_path in ("", "$"):
        return [data]
    current = [data]
    for step in key_path.removeprefix("$.").split("."):
        parsed = _STEP.match(step)
        if parsed is None:
            raise ValueError(f"bad step {step!r} in key path {key_path!r}")
        key = parsed.group("key")
        following: list[Any] = []
        for value in current:
            if key == "*":
                following.extend(value.values() if isinstance(value, dict) else [])
            elif key:
                if isinstance(value, dict) and key in value:
                    following.append(value[key])
            else:
                following.append(value)
        for index in re.findall(r"\[(\*|-?\d+)\]", parsed.group("index")):
            following = _index(following, index)
        current = following
        if not current:
            return []
    return current


def _index(values: list[Any], index: str) -> list[Any]:
    result: list[Any] = []
    for value in values:
        if not isinstance(value, list):
            continue
        if index == "*":
            result.extend(value)
        elif -len(value) <= int(index) < len(value):
            result.append(value[int(index)])
    return result


def values_at(ctx: TestContext, data: Any, key_path: str) -> list[Any]:
    """:func:`key_path_values`, a malformed path being an ERROR."""
    try:
        return key_path_values(data, key_path)
    except ValueError as exc:
        raise TestError(str(exc)) from None


def compare(ctx: TestContext, actual: Any, expected: Any, regex_match: bool = False) -> Comparison:
    """``expected`` with placeholders → by their metadata; ``regex_match`` → ``re.search``;
    else equality (a str expected also equals the text of a number or bool found)."""
    if has_placeholders(expected):
        return ctx.matches(_as_text(actual), expected)
    if regex_match and isinstance(expected, str):
        if expected == "*":
            return Comparison(True, f"value present: {snippet(actual)}")
        try:
            found = re.search(expected, _as_text(actual))
        except re.error as exc:
            raise TestError(f"bad regular expression {expected!r}: {exc}") from None
        verb = "matches" if found else "does not match"
        return Comparison(found is not None, f"{snippet(actual)} {verb} /{expected}/")
    ok = actual == expected or (
        isinstance(expected, str) and not isinstance(actual, str) and _as_text(actual) == expected
    )
    verb = "equals" if ok else "differs from expected"
    return Comparison(ok, f"{snippet(actual)} {verb} {snippet(expected)}")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value) if isinstance(value, (int, float)) else json.dumps(value, sort_keys=True)


def count_range(
    ctx: TestContext, expected_count: int | Mapping[str, int] | None
) -> tuple[int, float]:
    """``n`` → exactly n; ``{"min": a, "max": b}`` → a..b; None → at least 1."""
    if expected_count is None:
        return 1, float("inf")
    if isinstance(expected_count, int) and not isinstance(expected_count, bool):
        ctx.error_if(expected_count < 0, f"expected_count must be >= 0, got {expected_count}")
        return expected_count, expected_count
    if isinstance(expected_count, Mapping) and set(expected_count) <= {"min", "max"}:
        low = expected_count.get("min", 0)
        high = expected_count.get("max", float("inf"))
        return int(low), float(high)
    raise TestError(f"expected_count must be an int or {{min, max}}, got {expected_count!r}")


def describe_range(low: int, high: float) -> str:
    """``exactly 3``, ``at least 1``, ``2..5``."""
    if low == high:
        return f"exactly {low}"
    if high == float("inf"):
        return f"at least {low}"
    return f"{low}..{int(high)}"
