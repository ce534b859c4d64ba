"""The stock ``csv`` collection: rows and columns of a CSV file.

Cells are compared as text; an expected cell may be a ``{{ placeholder }}``
(e.g. a timestamp with tolerance). ``delimiter`` defaults to ``,``.
"""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

from adare_guest.stock.support import compare, count_range, describe_range, one_path, read_text
from adare_guest.testfunctions import TestContext, testfunction

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # browser exports have huge cells


def _rows(ctx: TestContext, dst: str, delimiter: str = ",") -> tuple[str, list[list[str]]]:
    path = one_path(ctx, dst)
    text = read_text(ctx, path, "utf-8-sig")
    try:
        return path, list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as exc:
        ctx.fail(f"{path} is not valid CSV: {exc}")


def _row_failures(ctx: TestContext, row: list[str], pattern: list[Any]) -> list[str]:
    if len(row) != len(pattern):
        return [f"{len(row)} columns, expected {len(pattern)}"]
    failures = []
    for index, (cell, expected) in enumerate(zip(row, pattern)):  # equal lengths (above)
        outcome = compare(ctx, cell, expected if isinstance(expected, str) else str(expected))
        if not outcome.ok:
            failures.append(f"col{index}: {outcome.message}")
    return failures


@testfunction(description="some row matches entry cell by cell")
def contains_line(
    ctx: TestContext, dst: str, entry: list[Any] | None = None, delimiter: str = ","
) -> list[str]:
    ctx.error_if(not entry, "entry (the expected cells) is required")
    assert entry is not None
    path, rows = _rows(ctx, dst, delimiter)
    ranked = []
    for index, row in enumerate(rows):
        failures = _row_failures(ctx, row, entry)
        if not failures:
            return [f"row {index} of {path} matches {entry}"]
        ranked.append((len(failures), index, row, failures))
    ranked.sort(key=lambda item: item[:2])
    closest = [f"row {i}: {row} ({'; '.join(f)})" for _, i, row, f in ranked[:3]]
    ctx.fail("\n".join([f"no row of {path} ({len(rows)} rows) matches {entry}", *closest]))


def _compare_tables(
    ctx: TestContext,
    actual: list[list[str]],
    reference: list[list[Any]],
    columns: list[int] | None,
    ignore_order: bool,
    allow_extra_rows: bool,
    allow_missing_rows: bool,
) -> list[str]:
    def pick(row: list[Any]) -> list[Any]:
        return [row[i] for i in columns if i < len(row)] if columns else list(row)

    got = [pick(row) for row in actual]
    want = [pick(row) for row in reference]
    if not ignore_order:
        problems = [
            f"row {i}: {'; '.join(_row_failures(ctx, g, w))}"
            for i, (g, w) in enumerate(zip(got, want))
            if _row_failures(ctx, g, w)
        ]
        unmatched_got, unmatched_want = got[len(want) :], want[len(got) :]
    else:
        problems, unmatched_got, unmatched_want = [], list(got), []
        for w in want:
            hit = next((g for g in unmatched_got if not _row_failures(ctx, g, w)), None)
            if hit is None:
                unmatched_want.append(w)
            else:
                unmatched_got.remove(hit)
    if unmatched_want and not allow_missing_rows:
        problems.append(f"{len(unmatched_want)} expected row(s) missing: {unmatched_want[:3]}")
    if unmatched_got and not allow_extra_rows:
        problems.append(f"{len(unmatched_got)} extra row(s): {unmatched_got[:3]}")
    ctx.fail_if(bool(problems), "\n".join(problems[:10]))
    return [f"{len(got)} row(s) compared with {len(want)} reference row(s): all match"]


@testfunction(description="the rows equal reference_rows (options: columns, order, extra/missing)")
def compare_rows(
    ctx: TestContext,
    dst: str,
    reference_rows: list[list[Any]] | None = None,
    columns: list[int] | None = None,
    ignore_order: bool = False,
    allow_extra_rows: bool = False,
    allow_missing_rows: bool = False,
) -> list[str]:
    _, rows = _rows(ctx, dst)
    return _compare_tables(
        ctx, rows, reference_rows or [], columns, ignore_order, allow_extra_rows, allow_missing_rows
    )


@testfunction(description="two CSV files hold the same rows (options as compare_rows)")
def compare_files(
    ctx: TestContext,
    actual: str = "",
    reference: str = "",
    columns: list[int] | None = None,
    ignore_order: bool = False,
    allow_extra_rows: bool = False,
    allow_missing_rows: bool = False,
) -> list[str]:
    _, got = _rows(ctx, actual)
    _, want = _rows(ctx, reference)
    return _compare_tables(
        ctx, got, list(want), columns, ignore_order, allow_extra_rows, allow_missing_rows
    )


@testfunction(description="the number of rows (without the header when header=True)")
def row_count(
    ctx: TestContext,
    dst: str,
    expected_count: int | dict[str, int] | None = None,
    header: bool = False,
    delimiter: str = ",",
) -> str:
    low, high = count_range(ctx, expected_count)
    path, rows = _rows(ctx, dst, delimiter)
    count = len(rows) - (1 if header and rows else 0)
    wanted = describe_range(low, high)
    ctx.fail_if(not low <= count <= high, f"{path} has {count} row(s), expected {wanted}")
    return f"{path} has {count} row(s) ({wanted})"


@testfunction(description="some cell of a column (header name or 0-based index) equals value")
def column_contains(
    ctx: TestContext, dst: str, column: str | int, value: Any, delimiter: str = ","
) -> str:
    path, rows = _rows(ctx, dst, delimiter)
    ctx.fail_if(not rows, f"{path} is empty")
    if isinstance(column, int):
        index, body = column, rows
    else:
        ctx.error_if(column not in rows[0], f"no column {column!r}; header: {rows[0]}")
        index, body = rows[0].index(column), rows[1:]
    expected = value if isinstance(value, str) else str(value)
    for number, row in enumerate(body):
        if index < len(row) and compare(ctx, row[index], expected).ok:
            return f"row {number} has {row[index]!r} in column {column!r}"
    ctx.fail(f"no cell of column {column!r} in {path} ({len(body)} rows) matches {expected!r}")
