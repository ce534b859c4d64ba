"""adare's timestamp filters in templates: ``tolerance``, ``format``, ``localtime``,
``timezone``.

``"{{ deleted_at | tolerance(5) }}"`` is no text but a :class:`TimestampTag`: the
timestamp and how a value found in the guest is compared with it (within 5 s either
way; ``format('%Y-%m-%d %H:%M:%S')``: the found text's strptime format; ``localtime``:
a found time without a zone is the guest's local time; ``timezone('+04:00')``: the
zone of the timestamp when it has none). A test parameter that is such a value goes
to the guest as a timestamp placeholder (:mod:`pytest_adare.playbook.tags`), which the
guest's test functions compare by those rules (``adare_guest.placeholders``). Inside
longer text a tag is its timestamp's text, compared exactly.

>>> tag = stamp_filters()["tolerance"]("2025-01-15T14:30:00+00:00", 30)
>>> tag = stamp_filters()["format"](tag, "%Y-%m-%dT%H:%M:%SZ")
>>> tag.metadata()["tolerance"], tag.metadata()["format"], str(tag)
([-30.0, 30.0], '%Y-%m-%dT%H:%M:%SZ', '2025-01-15T14:30:00+00:00')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2.filters import do_format


@dataclass(frozen=True)
class TimestampTag:
    """A timestamp with adare's comparison metadata (see the module's docstring)."""

    value: str
    tolerance: tuple[float, float] | None = None
    format: str | None = None
    localtime: bool = False
    timezone: str | None = None

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """What the tag is as text: without a tolerance and with a ``format``, the time in
        that format (adare's ``_apply_format_filter``: strftime of the time in its own
        zone), else the timestamp as written."""
        if self.tolerance is not None or self.format is None:
            return self.value
        try:
            moment = datetime.fromisoformat(self.value.replace("Z", "+00:00"))
            return moment.strftime(self.format)
        except ValueError:
            return self.value

    def metadata(self) -> dict[str, Any]:
        """The placeholder variable the guest compares with (``adare_guest.placeholders``)."""
        entry: dict[str, Any] = {"value": self.value, "type": "timestamp"}
        if self.tolerance is not None:
            entry["tolerance"] = list(self.tolerance)
        if self.format is not None:
            entry["format"] = self.format
        if self.localtime:
            entry["localtime"] = True
        if self.timezone is not None:
            entry["timezone"] = self.timezone
        return entry


def _is_timestamp(value: Any) -> bool:
    if isinstance(value, TimestampTag):
        return True
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _tag(value: Any, name: str) -> TimestampTag:
    if isinstance(value, TimestampTag):
        return value
    if not _is_timestamp(value):
        raise ValueError(f"the {name} filter takes a timestamp, got {value!r}")
    return TimestampTag(str(value).strip())


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"tolerance: {what} must be a number of seconds, got {value!r}")
    return float(value)


def stamp_filters() -> dict[str, Callable[..., Any]]:
    """The filters, by name, for the playbook's template environment."""

    def tolerance(value: Any, upper: Any, lower: Any = None) -> TimestampTag:
        high = _number(upper, "its bound")
        low = -abs(high) if lower is None else _number(lower, "its lower bound")
        return dataclasses.replace(_tag(value, "tolerance"), tolerance=(low, abs(high)))

    def stamp_format(value: Any, *args: Any, **kwargs: Any) -> Any:
        # Jinja's own format ("%s-%s" | format(a, b)) for anything that is no timestamp.
        if len(args) == 1 and not kwargs and isinstance(args[0], str) and _is_timestamp(value):
            return dataclasses.replace(_tag(value, "format"), format=args[0])
        return do_format(value, *args, **kwargs)

    def localtime(value: Any) -> TimestampTag:
        return dataclasses.replace(_tag(value, "localtime"), localtime=True)

    def timezone(value: Any, name: Any) -> TimestampTag:
        if not isinstance(name, str) or not name:
            wanted = "a zone name ('UTC', '+04:00', 'Europe/Berlin')"
            raise ValueError(f"timezone: {wanted}, not {name!r}")
        return dataclasses.replace(_tag(value, "timezone"), timezone=name)

    return {
        "tolerance": tolerance, "format": stamp_format, "localtime": localtime,
        "timezone": timezone,
    }  # fmt: skip
