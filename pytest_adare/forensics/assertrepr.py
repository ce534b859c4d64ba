"""Readable ``assert`` failures for filesystem diffs (pytest's ``assertrepr_compare``).

The plugin forwards ``pytest_assertrepr_compare(config, op, left, right)`` to
:func:`assertrepr_compare`, which explains::

    assert diff.deleted == {"/home/user/report.pdf"}
    assert diff.modified == {}
    assert diff == FsDiff.empty()
    assert "/home/user/x" in diff.created

by listing the unexpected and the missing changes with their metadata, plus
the rest of the diff as context.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from pytest_adare.forensics.diff import (
    FieldChanges,
    FsDiff,
    Modifications,
    PathSet,
    describe_changes,
    describe_entry,
    describe_fields,
)

LIMIT = 20


def assertrepr_compare(op: str, left: Any, right: Any) -> list[str] | None:
    """Explanation lines for a failed comparison involving a diff, else None."""
    if op in ("in", "not in") and isinstance(right, (PathSet, Modifications)):
        return _explain_membership(op, left, right)
    if op != "==":
        return None
    if isinstance(left, FsDiff) or isinstance(right, FsDiff):
        return _explain_diff(left, right)
    for actual, expected in ((left, right), (right, left)):
        if isinstance(actual, PathSet) and isinstance(expected, Set):
            return _explain_paths(actual, expected)
        if isinstance(actual, Modifications) and isinstance(expected, Mapping):
            return _explain_modifications(actual, expected)
    return None


def _limited(lines: list[str]) -> list[str]:
    if len(lines) <= LIMIT:
        return lines
    return [*lines[:LIMIT], f"  ... and {len(lines) - LIMIT} more"]


def _explain_paths(actual: PathSet, expected: Set[Any]) -> list[str]:
    diff, role = actual.diff, actual.role
    unexpected = sorted(actual - expected)
    missing = sorted(p for p in expected if p not in actual)
    lines = [f"diff.{role} has {len(unexpected)} unexpected and {len(missing)} missing paths"]
    if unexpected:
        lines.append(f"unexpected in diff.{role}:")
        lines += _limited([f"  {p}  {_entry_note(diff, p)}".rstrip() for p in unexpected])
    if missing:
        lines.append(f"expected in diff.{role} but not there:")
        lines += _limited([f"  {p}  {_where_else(diff, p)}".rstrip() for p in missing])
    return lines + _context(diff)


def _explain_modifications(actual: Modifications, expected: Mapping[Any, Any]) -> list[str]:
    diff = actual.diff
    unexpected = sorted(p for p in actual if p not in expected)
    missing = sorted(p for p in expected if p not in actual)
    differing = sorted(p for p in actual if p in expected and actual[p] != expected[p])
    lines = [
        f"diff.modified: {len(unexpected)} unexpected, {len(missing)} missing, "
        f"{len(differing)} with other changes than expected"
    ]
    if unexpected:
        lines.append("unexpected modifications:")
        lines += _limited([f"  {p}: {describe_fields(actual[p])}" for p in unexpected])
    if missing:
        lines.append("expected modifications that did not happen:")
        lines += _limited([f"  {p}  {_where_else(diff, p)}".rstrip() for p in missing])
    for path in differing[:LIMIT]:
        lines.append(f"  {path}: actual {describe_fields(actual[path])}")
        lines.append(f"  {' ' * len(path)}  expected {_describe_expected(expected[path])}")
    return lines + _context(diff)


def _explain_diff(left: Any, right: Any) -> list[str]:
    actual, expected = (left, right) if isinstance(left, FsDiff) else (right, left)
    if not isinstance(expected, FsDiff):
        return [f"comparing an FsDiff with {type(expected).__name__}", actual.headline()]
    created = actual.created - expected.created
    deleted = actual.deleted - expected.deleted
    modified: dict[str, FieldChanges] = {
        p: f for p, f in actual.modified.items() if expected.modified.get(p) != f
    }
    lines = ["the filesystem diff is not the expected one", actual.headline()]
    if created or deleted or modified:
        lines.append("unexpected changes:")
        lines += describe_changes(actual, created, deleted, modified, LIMIT)
    missing = [f"  + {p}" for p in sorted(expected.created - actual.created)]
    missing += [f"  - {p}" for p in sorted(expected.deleted - actual.deleted)]
    missing += [
        f"  ~ {p}: {describe_fields(f)}"
        for p, f in sorted(expected.modified.items())
        if actual.modified.get(p) != f
    ]
    if missing:
        lines.append("expected changes that did not happen (or differ):")
        lines += _limited(missing)
    return lines


def _explain_membership(op: str, path: Any, container: PathSet | Modifications) -> list[str]:
    diff = container.diff
    role = container.role if isinstance(container, PathSet) else "modified"
    if op == "in":
        lines = [f"{path!r} is not in diff.{role}", f"  {_where_else(diff, path)}".rstrip()]
    else:
        lines = [f"{path!r} is in diff.{role}", f"  {_entry_note(diff, path)}".rstrip()]
    return [line for line in lines if line.strip()] + _context(diff)


def _entry_note(diff: FsDiff | None, path: Any) -> str:
    if diff is None or not isinstance(path, str):
        return ""
    if path in diff.modified:
        return f"({describe_fields(diff.modified[path])})"
    described = describe_entry(diff.entry(path))
    return f"({described})" if described else ""


def _where_else(diff: FsDiff | None, path: Any) -> str:
    """Where a path that is not where the test expected it appears in the diff."""
    if diff is None or not isinstance(path, str):
        return ""
    for role, paths in (("created", diff.created), ("deleted", diff.deleted)):
        if path in paths:
            return f"(it was {role})"
    if path in diff.modified:
        return f"(it was modified: {describe_fields(diff.modified[path])})"
    return "(not changed at all)"


def _describe_expected(value: Any) -> str:
    if isinstance(value, Mapping) and all(
        isinstance(pair, tuple) and len(pair) == 2 for pair in value.values()
    ):
        return describe_fields(value)
    return repr(value)


def _context(diff: FsDiff | None) -> list[str]:
    if diff is None:
        return []
    return ["the whole diff:", f"  {diff.headline()}"] + [
        "  " + line
        for line in describe_changes(diff, diff.created, diff.deleted, diff.modified, LIMIT // 2)
    ]
