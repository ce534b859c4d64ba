"""A systemd guest's journal, read with ``journalctl -o json`` and parsed on the host.

:meth:`~pytest_adare.guest.AsyncGuest.journal` runs :func:`journal_command` in the guest
and hands its output to :func:`parse_journal`. The output is the guest's, so it is not
trusted: at most ``limit`` entries are asked for and accepted, the agent's output cap
bounds the bytes, and a line that is not a journal entry is an error naming it, not a
guess. journalctl writes one JSON object per entry; a field that is not valid UTF-8 comes
as a list of byte values and a field an entry has several times as a list of values
(``systemd.journal-fields(7)``, "JSON"): both are turned into text here.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pytest_adare.errors import AdareError

DEFAULT_LIMIT = 1000
"""Entries :meth:`~pytest_adare.guest.AsyncGuest.journal` returns at most (the newest)."""
MAX_LIMIT = 100_000
ENTRY_BYTES = 16 * 1024
"""Output budget per entry asked for: the agent keeps ``limit`` times this (capped)."""
MAX_OUTPUT = 64 * 1024 * 1024
NO_SYSTEMD = 200
"""The exit code of :func:`journal_command` (and of ``wait_for_unit``'s check) on a guest
without systemd."""


@dataclass(frozen=True)
class JournalEntry:
    """One journal entry: the fields a test asks for most, and all of them as text."""

    message: str
    """``MESSAGE``."""
    timestamp: datetime
    """``__REALTIME_TIMESTAMP``: when journald received it (aware, UTC)."""
    unit: str | None
    """``_SYSTEMD_UNIT``: the unit whose process logged it (None: the kernel, or none)."""
    identifier: str | None
    """``SYSLOG_IDENTIFIER`` (``logger -t NAME``, a program's own name)."""
    pid: int | None
    """``_PID``."""
    priority: int | None
    """``PRIORITY``, 0 (emerg) .. 7 (debug)."""
    boot_id: str | None
    """``_BOOT_ID``: entries of an earlier boot of this disk have another."""
    fields: Mapping[str, str] = field(repr=False)
    """Every field of the entry; a repeated field's values joined by newlines."""


def journal_command(
    unit: str | None = None,
    since: datetime | str | None = None,
    identifier: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> str:
    """The guest shell command that prints the newest ``limit`` matching entries as JSON.

    ``since``: an aware or naive (UTC) ``datetime``, or journalctl's own syntax
    (``"-5min"``, ``"today"``, ``"2026-12-01 10:00:00"``).

    >>> journal_command(unit="ssh.service", limit=5)  # doctest: +NORMALIZE_WHITESPACE
    '[ -d /run/systemd/system ] || exit 200; exec journalctl --no-pager --quiet -o json
     --lines=5 --unit=ssh.service'
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an int in 1..{MAX_LIMIT}, got {limit!r}")
    words = ["journalctl", "--no-pager", "--quiet", "-o", "json", f"--lines={limit}"]
    if unit is not None:
        words.append(f"--unit={unit}")
    if identifier is not None:
        words.append(f"--identifier={identifier}")
    if isinstance(since, datetime):
        moment = since if since.tzinfo is not None else since.replace(tzinfo=timezone.utc)
        words.append(f"--since=@{moment.timestamp():.6f}")
    elif since is not None:
        words.append(f"--since={since}")
    return f"[ -d /run/systemd/system ] || exit {NO_SYSTEMD}; exec " + shlex.join(words)


def output_budget(limit: int) -> int:
    """The bytes of output ``limit`` entries may take (the agent's cap for the call)."""
    return min(limit * ENTRY_BYTES, MAX_OUTPUT)


def parse_journal(text: str, limit: int = MAX_LIMIT) -> list[JournalEntry]:
    """The entries of ``journalctl -o json`` output, oldest first.

    :raise AdareError: a line is not a JSON object with ``MESSAGE`` and
        ``__REALTIME_TIMESTAMP``, or there are more than ``limit`` entries.
    """
    entries: list[JournalEntry] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(entries) == limit:
            raise AdareError(f"the guest's journal output has more than {limit} entries")
        entries.append(_entry(line, number))
    return entries


def _entry(line: str, number: int) -> JournalEntry:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise AdareError(f"journal line {number} is not JSON: {line[:200]!r}") from exc
    if not isinstance(raw, dict):
        raise AdareError(f"journal line {number} is not a JSON object: {line[:200]!r}")
    fields = {str(key): _text(value) for key, value in raw.items()}
    try:
        micros = int(fields["__REALTIME_TIMESTAMP"])
        moment = datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc)
    except (KeyError, ValueError, OverflowError, OSError) as exc:
        raise AdareError(f"journal line {number} has no valid __REALTIME_TIMESTAMP") from exc
    return JournalEntry(
        message=fields.get("MESSAGE", ""),
        timestamp=moment,
        unit=fields.get("_SYSTEMD_UNIT"),
        identifier=fields.get("SYSLOG_IDENTIFIER"),
        pid=_number(fields.get("_PID")),
        priority=_number(fields.get("PRIORITY")),
        boot_id=fields.get("_BOOT_ID"),
        fields=fields,
    )


def _text(value: Any) -> str:
    """A field's JSON value as text: a string, bytes as a list of ints, or a list of
    either (the field repeated); ``null`` (a field too large to show) is empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(type(item) is int and 0 <= item <= 255 for item in value):
            return bytes(value).decode("utf-8", "replace")
        return "\n".join(_text(item) for item in value)
    return json.dumps(value)


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 20 else None
