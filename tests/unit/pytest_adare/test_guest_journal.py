"""journalctl's JSON read on the host: fields, binary and repeated values, hostile lines."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_adare.errors import AdareError
from pytest_adare.guest_journal import journal_command, output_budget, parse_journal

LINE = {
    "__REALTIME_TIMESTAMP": "1764671400123456",
    "_BOOT_ID": "0f3c9b1e2d4a4c5e9f8a7b6c5d4e3f21",
    "MESSAGE": "Started adare-agent.service - adare guest agent.",
    "_SYSTEMD_UNIT": "init.scope",
    "SYSLOG_IDENTIFIER": "systemd",
    "_PID": "1",
    "PRIORITY": "6",
}


def test_an_entry_has_its_fields_and_an_aware_time() -> None:
    (entry,) = parse_journal(json.dumps(LINE) + "\n")
    assert entry.message == LINE["MESSAGE"]
    assert entry.timestamp == datetime(2025, 12, 2, 10, 30, 0, 123456, tzinfo=timezone.utc)
    assert (entry.unit, entry.identifier, entry.pid, entry.priority) == (
        "init.scope", "systemd", 1, 6
    )  # fmt: skip
    assert entry.boot_id == LINE["_BOOT_ID"] and entry.fields["_PID"] == "1"


def test_binary_repeated_and_missing_fields_become_text() -> None:
    raw = {
        **LINE,
        "MESSAGE": list("caf\xe9\n".encode("latin-1")),  # not UTF-8: journalctl's byte list
        "TAG": ["one", "two"],
        "BIG": None,  # journalctl's null: a value above its --output-fields size
    }
    del raw["_PID"], raw["PRIORITY"]
    (entry,) = parse_journal(json.dumps(raw))
    assert entry.message == "caf\ufffd\n"
    assert entry.fields["TAG"] == "one\ntwo" and entry.fields["BIG"] == ""
    assert entry.pid is None and entry.priority is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "journal line 1 is not JSON"),
        ("[1, 2]", "journal line 1 is not a JSON object"),
        ('{"MESSAGE": "no time"}', "no valid __REALTIME_TIMESTAMP"),
        ('{"__REALTIME_TIMESTAMP": "99999999999999999999999"}', "no valid __REALTIME"),
    ],
)
def test_a_line_that_is_not_an_entry_is_an_error_naming_it(line: str, problem: str) -> None:
    with pytest.raises(AdareError, match=problem):
        parse_journal(line)


def test_more_entries_than_asked_for_are_refused() -> None:
    text = "\n".join(json.dumps(LINE) for _ in range(3))
    assert len(parse_journal(text, limit=3)) == 3
    with pytest.raises(AdareError, match="more than 2 entries"):
        parse_journal(text, limit=2)


def test_the_command_quotes_what_it_is_given_and_bounds_the_count() -> None:
    command = journal_command(unit="a b; rm -rf /", since="-5min", identifier="x'y", limit=7)
    assert "'--unit=a b; rm -rf /'" in command and " --since=-5min" in command
    assert "--lines=7" in command and "'--identifier=x'\"'\"'y'" in command
    naive = journal_command(since=datetime(2026, 12, 2, 10, 0, 0))
    assert "--since=@1796205600.000000" in naive
    for bad in (0, -1, 100_001, 1.5, True):
        with pytest.raises(ValueError, match="limit must be an int"):
            journal_command(limit=bad)  # type: ignore[arg-type]
    assert output_budget(10) == 10 * 16 * 1024 and output_budget(100_000) == 64 * 1024 * 1024


def test_a_real_guests_journal_parses_entry_by_entry() -> None:
    # `journalctl -o json --lines=30` on debian-systemd after `logger -t adare-sample` and
    # `printf 'caf\351\n' | systemd-cat -t adare-bin` (a byte that is not UTF-8).
    text = (Path(__file__).resolve().parents[1] / "data/journal/debian-systemd.jsonl").read_text()
    entries = parse_journal(text)
    assert len(entries) == 30
    assert entries == sorted(entries, key=lambda entry: entry.timestamp)
    by_name = {entry.identifier: entry for entry in entries}
    assert by_name["adare-sample"].message == "a sample line"
    assert by_name["adare-bin"].message == "caf\ufffd"
    assert {entry.boot_id for entry in entries} == {entries[0].boot_id}
    assert all(entry.fields["_HOSTNAME"] == "adare-debian-systemd" for entry in entries)
