"""A tool's records as plain data: one ``dict`` of JSON values per record.

Scoring, the version table and the subprocess that runs an analysis step in another
tool version all work on this one form, so a record read in-process and the same record
sent back as JSON score alike. Dissect records become their fields (``_asdict()``)
without the bookkeeping ones (``_generated``, ``_source``, ...: they differ on every
run); timestamps become ISO 8601 text, paths and the rest their ``str``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

JSONValue = str | int | float | bool | None
PlainRecord = dict[str, JSONValue]
ToolRecords = dict[str, list[PlainRecord]]
"""A tool's findings: the record kind (the test's name for it, e.g. ``trash``) → records."""

MAX_RECORDS = 1_000_000
"""Records one kind may hold: a step that yields without end fails instead of filling
the host's memory."""


def plain_value(value: Any) -> JSONValue:
    """One field as a JSON value (``bool``/``int`` subclasses such as Dissect's
    ``filesize`` become plain numbers)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def plain_record(record: Any) -> PlainRecord:
    """A record's fields: a mapping's items, a Dissect record's ``_asdict()``, a
    dataclass-like object's ``__dict__``; fields starting with ``_`` are dropped.

    :raise TypeError: for anything that has no fields.
    """
    if isinstance(record, Mapping):
        fields = record
    elif hasattr(record, "_asdict"):
        fields = record._asdict()
    elif hasattr(record, "__dict__"):
        fields = vars(record)
    else:
        raise TypeError(f"a record must be a mapping or have fields, got {type(record).__name__}")
    return {str(k): plain_value(v) for k, v in fields.items() if not str(k).startswith("_")}


def plain_records(found: Mapping[str, Iterable[Any]]) -> ToolRecords:
    """Every kind's records as plain records.

    :raise ValueError: a kind with more than :data:`MAX_RECORDS` records.
    """
    result: ToolRecords = {}
    for kind, records in found.items():
        rows: list[PlainRecord] = []
        for record in records:
            if len(rows) == MAX_RECORDS:
                raise ValueError(f"{kind}: more than {MAX_RECORDS} records")
            rows.append(plain_record(record))
        result[str(kind)] = rows
    return result


def parse_time(value: JSONValue | dt.datetime) -> dt.datetime | None:
    """A timestamp field as an aware datetime (naive ones are UTC), else None."""
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc)
    else:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)
