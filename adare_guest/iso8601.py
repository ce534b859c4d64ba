"""ISO 8601 date-times read as Python 3.11's ``datetime.fromisoformat`` reads them, on 3.9 too.

Python 3.11 reads most of ISO 8601; 3.9 and 3.10 only what ``isoformat()`` writes.
On those (the guest's python3 may be 3.9), :func:`fromisoformat` rewrites the
well-formed forms 3.11 added into that narrower one first: fractions of any length
(``.5``, ``,123456789``), offsets without a colon (``+0100``, ``+01``), ``Z``,
the basic format (``20240501T100003``) and week dates (``2024-W18-3``).
Anything else is left to the old parser, which refuses what 3.11 refuses.
"""

from __future__ import annotations

import datetime
import re

_DATE = re.compile(
    r"(?P<year>\d{4})(?:(?P<dash>-?)(?P<month>\d{2})(?P=dash)(?P<day>\d{2})"
    r"|(?P<wdash>-?)W(?P<week>\d{2})(?:(?P=wdash)(?P<weekday>\d))?)",
    re.ASCII,
)
_TIME = re.compile(
    r"(?P<hour>\d{2})(?:(?P<colon>:?)(?P<minute>\d{2})"
    r"(?:(?P=colon)(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?)?)?",
    re.ASCII,
)
_OFFSET = re.compile(
    r"Z|(?P<sign>[+-])(?P<hours>\d{2})(?:(?P<colon>:?)(?P<minutes>\d{2})"
    r"(?:(?P=colon)(?P<seconds>\d{2})(?:[.,](?P<fraction>\d+))?)?)?",
    re.ASCII,
)


def _fraction(digits: str | None) -> str:
    """``.ffffff`` of a decimal fraction of any length (truncated like 3.11), or ``""``."""
    return "" if digits is None else "." + digits[:6].ljust(6, "0")


def _date(text: str) -> str | None:
    found = _DATE.fullmatch(text)
    if found is None:
        return None
    if found["week"] is None:
        return f"{found['year']}-{found['month']}-{found['day']}"
    year, week, weekday = int(found["year"]), int(found["week"]), int(found["weekday"] or 1)
    return datetime.date.fromisocalendar(year, week, weekday).isoformat()


def _time(text: str) -> str | None:
    for end in range(len(text), 1, -1):  # the time is the longest prefix that reads as one
        found = _TIME.fullmatch(text, 0, end)
        if found is None:
            continue
        offset = _offset(text[end:])
        if offset is None:
            return None
        minute, second = found["minute"] or "00", found["second"]
        clock = f"{found['hour']}:{minute}" + (f":{second}" if second else "")
        return clock + _fraction(found["fraction"]) + offset
    return None


def _offset(text: str) -> str | None:
    if not text:
        return ""
    found = _OFFSET.fullmatch(text)
    if found is None:
        return None
    if text == "Z":
        return "+00:00"
    seconds = found["seconds"]
    return (
        f"{found['sign']}{found['hours']}:{found['minutes'] or '00'}"
        + (f":{seconds}" if seconds else "")
        + _fraction(found["fraction"])
    )


def extended_form(text: str) -> str | None:
    """``text`` rewritten into the form Python 3.9's ``fromisoformat`` reads, or None
    when it is not a well-formed ISO 8601 date or date-time.

    :raise ValueError: a week date names a week or day that does not exist.
    """
    for length in (10, 8, 7):  # YYYY-MM-DD, YYYYMMDD or YYYY-Www, YYYYWww
        date = _date(text[:length])
        if date is None:
            continue
        rest = text[length:]
        if not rest:
            return date
        if rest[0].isdigit():  # the date-time separator: any one character but a digit
            continue
        time = _time(rest[1:])
        if time is not None:
            return f"{date}{rest[0]}{time}"
    return None


def _reads_iso_8601() -> bool:
    try:
        datetime.datetime.fromisoformat("2024-W18-3T10:00:03,5+0100")
    except ValueError:
        return False
    return True


_NATIVE = _reads_iso_8601()
"""The running Python's own ``fromisoformat`` reads ISO 8601 (3.11 and later)."""


def fromisoformat(text: str) -> datetime.datetime:
    """``datetime.datetime.fromisoformat(text)`` as Python 3.11 and later answer it.

    :raise ValueError: ``text`` is not an ISO 8601 date or date-time.
    """
    if _NATIVE:
        return datetime.datetime.fromisoformat(text)
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        refused = exc
    rewritten = extended_form(text)
    if rewritten is None or rewritten == text:
        raise refused
    return datetime.datetime.fromisoformat(rewritten)
