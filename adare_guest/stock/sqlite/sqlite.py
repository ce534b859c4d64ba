"""The stock ``sqlite`` collection: tables, rows and query results of SQLite databases.

The database is opened read-only (``mode=ro``), so a check never changes it.
A missing database file is FAILED; a bad parameter is ERROR. Row values in
``where`` and ``expected_result`` may hold ``{{ placeholders }}``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from adare_guest.stock.support import compare, count_range, describe_range, one_path
from adare_guest.testfunctions import TestContext, TestError, testfunction


@contextmanager
def _database(ctx: TestContext, dst: str) -> Iterator[sqlite3.Connection]:
    path = one_path(ctx, dst)
    # adare's checks open a missing database with sqlite3.connect, which creates it
    # empty: the same verdicts come from an empty in-memory database, and the guest's
    # disk (the scenario's evidence) gets no new file. An existing one is read-only.
    ctx.error_if(os.path.isdir(path), f"{path} is a directory, not a database")
    source = f"{Path(path).absolute().as_uri()}?mode=ro" if os.path.exists(path) else ":memory:"
    try:
        connection = sqlite3.connect(source, uri=source != ":memory:")
    except sqlite3.Error as exc:
        raise TestError(f"cannot open {path}: {exc}") from None
    try:
        connection.row_factory = sqlite3.Row
        yield connection
    finally:
        connection.close()


def _rows(
    ctx: TestContext, connection: sqlite3.Connection, sql: str, args: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    try:
        return [dict(row) for row in connection.execute(sql, args).fetchall()]
    except sqlite3.DatabaseError as exc:
        ctx.fail(f"SQLite error for {sql!r}: {exc}")


def _tables(ctx: TestContext, connection: sqlite3.Connection) -> list[str]:
    rows = _rows(ctx, connection, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return sorted(row["name"] for row in rows)


def _table_rows(
    ctx: TestContext, connection: sqlite3.Connection, table: str
) -> list[dict[str, Any]]:
    tables = _tables(ctx, connection)
    ctx.fail_if(table not in tables, f"no table {table!r}; tables: {tables}")
    quoted = '"' + table.replace('"', '""') + '"'
    return _rows(ctx, connection, f"SELECT * FROM {quoted}")


def _matching(
    ctx: TestContext, rows: list[dict[str, Any]], where: Mapping[str, Any]
) -> list[dict[str, Any]]:
    if rows:
        unknown = sorted(set(where) - set(rows[0]))
        ctx.error_if(bool(unknown), f"no column(s) {unknown}; columns: {sorted(rows[0])}")
    return [row for row in rows if all(compare(ctx, row.get(k), v).ok for k, v in where.items())]


@testfunction(description="the database has a table (or view) of that name")
def table_exists(ctx: TestContext, dst: str, table: str) -> str:
    with _database(ctx, dst) as connection:
        tables = _tables(ctx, connection)
    ctx.fail_if(table not in tables, f"no table {table!r}; tables: {tables}")
    return f"table {table!r} exists"


@testfunction(description="a row of table has every column value in where")
def row_exists(ctx: TestContext, dst: str, table: str, where: dict[str, Any]) -> list[str]:
    ctx.error_if(not where, "where must name at least one column")
    with _database(ctx, dst) as connection:
        rows = _table_rows(ctx, connection, table)
    hits = _matching(ctx, rows, where)
    ctx.fail_if(not hits, f"none of the {len(rows)} rows of {table!r} has {where}")
    return [f"{len(hits)} row(s) of {table!r} match", f"first: {hits[0]}"]


@testfunction(description="the number of rows of table (matching where) is expected_count")
def row_count(
    ctx: TestContext,
    dst: str,
    table: str,
    expected_count: int | dict[str, int] | None = None,
    where: dict[str, Any] | None = None,
) -> str:
    low, high = count_range(ctx, expected_count)
    with _database(ctx, dst) as connection:
        rows = _table_rows(ctx, connection, table)
    count = len(_matching(ctx, rows, where or {}))
    wanted = describe_range(low, high)
    ctx.fail_if(
        not low <= count <= high, f"{table!r} has {count} matching row(s), expected {wanted}"
    )
    return f"{table!r} has {count} matching row(s) ({wanted})"


@testfunction(description="a SQL query returns expected_rows rows and/or exactly expected_result")
def query_result(
    ctx: TestContext,
    dst: str,
    query: str,
    expected_rows: int | None = None,
    expected_result: list[dict[str, Any]] | None = None,
) -> list[str]:
    with _database(ctx, dst) as connection:
        result = _rows(ctx, connection, query)
    ctx.fail_if(
        expected_rows is not None and len(result) != expected_rows,
        f"expected {expected_rows} rows, got {len(result)}: {result[:5]}",
    )
    if expected_result is not None:
        ctx.error_if(
            not all(isinstance(row, dict) for row in expected_result),
            "expected_result must be a list of objects (column -> value)",
        )
        ctx.fail_if(
            len(result) != len(expected_result),
            f"query returned {len(result)} rows, expected_result has "
            f"{len(expected_result)}: {result[:5]}",
        )
        for index, (got, want) in enumerate(zip(result, expected_result)):  # equal lengths
            ctx.fail_if(
                set(got) != set(want),
                f"row {index} has columns {sorted(got)}, expected {sorted(want)}",
            )
            for column, value in want.items():
                outcome = compare(ctx, got[column], value)
                ctx.fail_if(not outcome.ok, f"row {index} column {column!r}: {outcome.message}")
    return [f"query returned {len(result)} rows"]
