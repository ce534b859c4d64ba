"""``{{ name }}`` placeholders in test parameters, compared by their variable's metadata.

A test parameter may hold placeholders such as ``"DeletionDate={{ deleted_at }}"``.
Each placeholder names a variable; its *metadata* says how a value found in
the guest is compared with it (adare's ``_VARIABLE_METADATA`` format):

- no ``type`` or ``type: "string"``: the text equals ``resolved_value`` exactly;
- ``type: "regex"``: ``re.match(resolved_value, actual)`` (anchored at the start);
- ``type: "timestamp"`` with ``tolerance`` (seconds, a number ``t`` meaning
  ``[-t, t]`` or a pair ``[a, b]``): ``expected - actual`` lies in the range;
  ``format`` (strptime) parses the actual text (ISO 8601 and epoch seconds are
  always understood), ``localtime: true`` reads a naive actual time as guest
  local time (else UTC), ``timezone`` (``"utc"``, ``"+05:30"`` or an IANA name)
  is the zone of a naive *expected* value. Without a tolerance a timestamp is
  compared exactly, as text.

Variables come from ``set_variables`` or the call; a plain value ``"x"`` is an
exact placeholder, ``{"value": ..., "type": ..., "tolerance": ...}`` carries
metadata. Explicit ``_VARIABLE_METADATA`` entries win over both.

>>> p = Placeholders({"user": "alice", "ts": {"value": 100, "type": "timestamp", "tolerance": 5}})
>>> p.resolve("home of {{ user }}")
'home of alice'
>>> p.match_template("at 103 by alice", "at {{ ts }} by {{ user }}").ok
True
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from adare_guest.iso8601 import fromisoformat

__all__ = [
    "PLACEHOLDER",
    "Comparison",
    "PlaceholderError",
    "Placeholders",
    "has_placeholders",
    "parse_instant",
    "placeholder_names",
    "tolerance_range",
]

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
"""``{{ name }}`` with optional spaces; group 1 is the name."""

_METADATA_KEYS = ("type", "tolerance", "localtime", "format", "timezone")
_TYPES = ("string", "regex", "timestamp")
_OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")
T = TypeVar("T")
U = TypeVar("U")


class PlaceholderError(ValueError):
    """A placeholder cannot be compared: unknown variable or unusable metadata."""


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing guest text with a placeholder or a template."""

    ok: bool
    message: str


def has_placeholders(text: object) -> bool:
    """True when ``text`` (a str) holds at least one ``{{ name }}``."""
    return isinstance(text, str) and PLACEHOLDER.search(text) is not None


def placeholder_names(text: str) -> list[str]:
    """The placeholder names in ``text``, in order (repeats kept)."""
    return [m.group(1) for m in PLACEHOLDER.finditer(text)]


def _metadata_from_variable(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping) and "value" in value and "type" in value:
        meta = {k: value[k] for k in _METADATA_KEYS if k in value}
        raw = value["value"]
        return {**meta, "raw_value": raw, "resolved_value": raw}
    return {"type": "string", "raw_value": value, "resolved_value": value}


class Placeholders:
    """Variables and their metadata for one test run; resolves and compares placeholders."""

    def __init__(
        self,
        variables: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._variables = dict(variables or {})
        self._metadata = {str(k): dict(v) for k, v in (metadata or {}).items()}

    @property
    def metadata(self) -> dict[str, dict[str, Any]]:
        """Metadata of every known placeholder (explicit entries and variables)."""
        merged = {name: _metadata_from_variable(v) for name, v in self._variables.items()}
        merged.update(self._metadata)
        return merged

    def metadata_for(self, name: str) -> dict[str, Any] | None:
        """The metadata of placeholder ``name``, or None when nothing defines it."""
        if name in self._metadata:
            return dict(self._metadata[name])
        if name in self._variables:
            return _metadata_from_variable(self._variables[name])
        return None

    def is_exact(self, name: str) -> bool:
        """True when ``name`` is known and compares as plain text (so it can be substituted)."""
        meta = self.metadata_for(name)
        if meta is None:
            return False
        kind = meta.get("type", "string")
        return kind == "string" or (kind == "timestamp" and not meta.get("tolerance"))

    def resolve(self, text: str, *, exact_only: bool = False) -> str:
        """Replace known placeholders by their value; unknown ones stay as they are.

        With ``exact_only`` only placeholders compared as plain text are replaced,
        so regex and tolerance placeholders are left for a check to compare.
        """

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            meta = self.metadata_for(name)
            if meta is None or (exact_only and not self.is_exact(name)):
                return match.group(0)
            return _text(meta.get("resolved_value", ""))

        return PLACEHOLDER.sub(replace, text)

    def resolve_params(self, value: Any) -> Any:
        """:meth:`resolve` (``exact_only``) through the strings of nested dicts and lists."""
        if isinstance(value, str):
            return self.resolve(value, exact_only=True)
        if isinstance(value, list):
            return [self.resolve_params(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve_params(v) for k, v in value.items()}
        return value

    def compare(self, name: str, actual: object) -> Comparison:
        """Compare ``actual`` (as text) with placeholder ``name`` by its metadata.

        :raise PlaceholderError: unknown placeholder or unusable metadata.
        """
        meta = self.metadata_for(name)
        if meta is None:
            raise PlaceholderError(
                f"placeholder {{{{ {name} }}}} has no variable; known: {sorted(self.metadata)}"
            )
        kind = meta.get("type", "string")
        if kind not in _TYPES:
            raise PlaceholderError(f"placeholder {name!r} has unknown type {kind!r}; use {_TYPES}")
        text = _text(actual)
        expected = meta.get("resolved_value", meta.get("raw_value", ""))
        if kind == "regex":
            return _compare_regex(name, text, _text(expected))
        if kind == "timestamp" and meta.get("tolerance"):
            return _compare_timestamp(name, text, expected, meta)
        ok = text == _text(expected)
        verb = "equals" if ok else "differs from"
        return Comparison(ok, f"{name}: {text!r} {verb} {_text(expected)!r}")

    def match_template(self, actual: str, template: str) -> Comparison:
        """Match ``actual`` against ``template``: its literal text must appear as is and
        each placeholder's share of ``actual`` must pass :meth:`compare`.

        :raise PlaceholderError: as :meth:`compare`, or two placeholders with no text
            between them (where one ends cannot be known).
        """
        names = placeholder_names(template)
        literals = PLACEHOLDER.split(template)[::2]  # split() interleaves the group
        if not names:
            ok = actual == template
            return Comparison(ok, "text equals the template" if ok else "text differs")
        for i, literal in enumerate(literals[1:-1], start=1):
            if not literal:
                raise PlaceholderError(
                    f"placeholders {names[i - 1]!r} and {names[i]!r} have no text between "
                    "them, so where one ends cannot be known"
                )
        groups = ["(.*?)"] * (len(names) - 1) + ["(.*)"]
        pattern = re.escape(literals[0]) + "".join(
            g + re.escape(lit) for g, lit in _zip_strict(groups, literals[1:])
        )
        found = re.fullmatch(pattern, actual, re.DOTALL)
        if found is None:
            return Comparison(False, f"the text around the placeholders differs from {template!r}")
        results = [self.compare(n, v) for n, v in _zip_strict(names, found.groups())]
        ok = all(r.ok for r in results)
        return Comparison(ok, "; ".join(r.message for r in results))

    def __iter__(self) -> Iterator[str]:
        return iter(self.metadata)


def _zip_strict(first: Sequence[T], second: Sequence[U]) -> zip[tuple[T, U]]:
    """``zip(first, second, strict=True)`` of two sequences (``strict`` is Python 3.10+)."""
    if len(first) != len(second):
        which = "shorter" if len(second) < len(first) else "longer"
        raise ValueError(f"zip() argument 2 is {which} than argument 1")
    return zip(first, second)


def _text(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def _compare_regex(name: str, actual: str, pattern: str) -> Comparison:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise PlaceholderError(f"placeholder {name!r}: bad regex {pattern!r}: {exc}") from None
    ok = regex.match(actual) is not None
    verb = "matches" if ok else "does not match"
    return Comparison(ok, f"{name}: {actual!r} {verb} /{pattern}/")


def tolerance_range(tolerance: Any) -> tuple[float, float]:
    """``t`` → ``(-|t|, |t|)``; ``[a, b]`` → ``(min, max)``.

    :raise PlaceholderError: anything else.
    """
    if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
        return -abs(float(tolerance)), abs(float(tolerance))
    if (
        isinstance(tolerance, (list, tuple))
        and 1 <= len(tolerance) <= 2
        and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in tolerance)
    ):
        low, high = float(tolerance[0]), float(tolerance[-1])
        return min(low, high), max(low, high)
    raise PlaceholderError(f"tolerance must be a number or [a, b], got {tolerance!r}")


def _zone(name: str) -> datetime.tzinfo:
    if name.lower() in ("utc", "z"):
        return datetime.timezone.utc
    offset = _OFFSET.match(name)
    if offset:
        sign, hours, minutes = offset.groups()
        delta = datetime.timedelta(hours=int(hours), minutes=int(minutes))
        return datetime.timezone(-delta if sign == "-" else delta)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise PlaceholderError(f"unknown timezone {name!r}") from None


def parse_instant(value: object, fmt: str | None, naive_zone: datetime.tzinfo) -> datetime.datetime:
    """Epoch seconds, ``fmt`` (strptime) or ISO 8601 → an aware datetime.

    A naive result is taken to be in ``naive_zone``.

    :raise PlaceholderError: the value fits none of them.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(float(value), datetime.timezone.utc)
    text = _text(value).strip()
    try:
        return datetime.datetime.fromtimestamp(float(text), datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    parsed: datetime.datetime | None = None
    if fmt:
        try:
            parsed = datetime.datetime.strptime(text, fmt)
        except ValueError:
            parsed = None
    if parsed is None:
        try:
            parsed = fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            hint = f" or format {fmt!r}" if fmt else ""
            raise PlaceholderError(
                f"{text!r} is not a timestamp (epoch seconds, ISO 8601{hint})"
            ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=naive_zone)


def _local_zone() -> datetime.tzinfo:
    zone = datetime.datetime.now().astimezone().tzinfo
    return zone if zone is not None else datetime.timezone.utc


def _compare_timestamp(
    name: str, actual: str, expected: object, meta: Mapping[str, Any]
) -> Comparison:
    low, high = tolerance_range(meta["tolerance"])
    fmt = meta.get("format")
    if fmt is not None and not isinstance(fmt, str):
        raise PlaceholderError(f"placeholder {name!r}: format must be a string, got {fmt!r}")
    timezone = meta.get("timezone")
    local = bool(meta.get("localtime", False))
    actual_zone = _local_zone() if local else datetime.timezone.utc
    expected_zone = _zone(str(timezone)) if timezone else actual_zone
    want = parse_instant(expected, fmt, expected_zone)
    try:
        got = parse_instant(actual, fmt, actual_zone)
    except PlaceholderError as exc:
        return Comparison(False, f"{name}: {exc}")
    diff = (want - got).total_seconds()
    ok = low <= diff <= high
    where = "within" if ok else "outside"
    return Comparison(
        ok,
        f"{name}: {actual!r} is {diff:+.3f} s from {want.isoformat()}, {where} "
        f"tolerance [{low:g}, {high:g}] s",
    )
