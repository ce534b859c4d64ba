"""The stock ``jsonl`` collection: lines of a JSON Lines file (one JSON value per line).

``conditions`` maps key paths (as in ``json``) to expected values; a line
matches when every condition holds. ``regex_match`` compares with
``re.search`` and ``"*"`` then means "present". Malformed lines are skipped
(``skip_malformed``) or make the check FAILED.
"""

from __future__ import annotations

import json
from typing import Any

from adare_guest.stock.support import (
    compare,
    count_range,
    describe_range,
    one_path,
    read_bytes,
    read_text,
    values_at,
)
from adare_guest.testfunctions import TestContext, testfunction


def _records(ctx: TestContext, dst: str, skip_malformed: bool) -> tuple[str, list[Any], int]:
    path = one_path(ctx, dst)
    text = read_text(ctx, path, "utf-8-sig")
    # adare's three JSONL checks fail on an empty file, whatever they were asked.
    ctx.fail_if(text == "" and not read_bytes(ctx, path), f"{path}: JSONL file is empty (0 bytes)")
    records, malformed = [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            ctx.fail_if(not skip_malformed, f"{path} line {number} is not JSON: {exc}")
            malformed += 1
    return path, records, malformed


def _line_matches(
    ctx: TestContext, record: Any, conditions: dict[str, Any], regex_match: bool
) -> bool:
    for key_path, expected in conditions.items():
        values = values_at(ctx, record, key_path)
        if not any(compare(ctx, value, expected, regex_match).ok for value in values):
            return False
    return True


@testfunction(description="some (any) or every (all) line meets all conditions")
def line_matches(
    ctx: TestContext,
    dst: str = "",
    conditions: dict[str, Any] | None = None,
    match_mode: str = "any",
    regex_match: bool = False,
    skip_malformed: bool = True,
) -> list[str]:
    ctx.error_if(not conditions, "conditions must name at least one key path")
    ctx.error_if(
        match_mode not in ("any", "all"), f"match_mode must be any or all, got {match_mode!r}"
    )
    assert conditions is not None
    path, records, malformed = _records(ctx, dst, skip_malformed)
    ctx.fail_if(not records, f"{path} has no JSON lines")
    hits = sum(_line_matches(ctx, r, conditions, regex_match) for r in records)
    summary = f"{hits}/{len(records)} lines of {path} meet {conditions} (mode: {match_mode})"
    enough = hits == len(records) if match_mode == "all" else hits > 0
    ctx.fail_if(not enough, summary)
    return [summary] + ([f"{malformed} malformed line(s) skipped"] if malformed else [])


@testfunction(description="the number of lines meeting the conditions (all lines without)")
def line_count(
    ctx: TestContext,
    dst: str = "",
    conditions: dict[str, Any] | None = None,
    expected_count: int | dict[str, int] | None = None,
    regex_match: bool = False,
    skip_malformed: bool = True,
) -> str:
    low, high = count_range(ctx, expected_count)
    path, records, _ = _records(ctx, dst, skip_malformed)
    count = sum(_line_matches(ctx, r, conditions or {}, regex_match) for r in records)
    wanted = describe_range(low, high)
    ctx.fail_if(not low <= count <= high, f"{path}: {count} matching line(s), expected {wanted}")
    return f"{path}: {count} matching line(s) ({wanted})"


@testfunction(description="some line has expected_value at key_path")
def value_in_any_line(
    ctx: TestContext,
    dst: str = "",
    key_path: str = "",
    expected_value: Any = None,
    regex_match: bool = False,
    skip_malformed: bool = True,
) -> str:
    ctx.error_if(not key_path, "key_path is required")
    path, records, _ = _records(ctx, dst, skip_malformed)
    for number, record in enumerate(records, 1):
        if _line_matches(ctx, record, {key_path: expected_value}, regex_match):
            return f"record {number} of {path} has {key_path} = {expected_value!r}"
    ctx.fail(f"none of the {len(records)} records of {path} has {key_path} = {expected_value!r}")
