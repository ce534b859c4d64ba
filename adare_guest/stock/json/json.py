"""The stock ``json`` collection: key paths, values and arrays in a JSON file.

Key paths use dots: ``user.name``, ``items[0].id``, ``items[*].id`` (every
item), ``config.*.enabled`` (every key). A missing file or invalid JSON is
FAILED. ``expected_value`` may be a ``{{ placeholder }}``.
"""

from __future__ import annotations

from typing import Any

from adare_guest.stock.support import (
    compare,
    count_range,
    describe_range,
    load_json,
    one_path,
    snippet,
    values_at,
)
from adare_guest.testfunctions import TestContext, testfunction


def _values(ctx: TestContext, dst: str, key_path: str) -> list[Any]:
    return values_at(ctx, load_json(ctx, one_path(ctx, dst)), key_path)


@testfunction(description="the key path exists in the JSON file")
def contains_key(ctx: TestContext, dst: str, key_path: str) -> str:
    values = _values(ctx, dst, key_path)
    ctx.fail_if(not values, f'key path "{key_path}" does not exist')
    shown = values[0] if len(values) == 1 else values
    return f'key path "{key_path}" exists with value: {snippet(shown)}'


@testfunction(description="the value(s) at the key path equal or match expected_value (any/all)")
def value_matches(
    ctx: TestContext,
    dst: str,
    key_path: str,
    expected_value: Any = None,
    regex_match: bool = False,
    wildcard_mode: str = "any",
) -> list[str]:
    ctx.error_if(
        wildcard_mode not in ("any", "all"),
        f"wildcard_mode must be any or all, got {wildcard_mode!r}",
    )
    values = _values(ctx, dst, key_path)
    ctx.fail_if(not values, f'key path "{key_path}" does not exist')
    outcomes = [compare(ctx, value, expected_value, regex_match) for value in values]
    hits = sum(o.ok for o in outcomes)
    if len(values) == 1:
        ctx.fail_if(not hits, outcomes[0].message)
        return [outcomes[0].message]
    enough = hits == len(values) if wildcard_mode == "all" else hits > 0
    summary = f'"{key_path}" matched {hits}/{len(values)} values (mode: {wildcard_mode})'
    misses = [o.message for o in outcomes if not o.ok][:3]
    ctx.fail_if(not enough, "; ".join([summary, *misses]))
    return [summary]


@testfunction(description="the array at array_path contains expected_element")
def array_contains(
    ctx: TestContext, dst: str, array_path: str, expected_element: Any = None
) -> str:
    values = _values(ctx, dst, array_path)
    ctx.fail_if(not values, f'array path "{array_path}" does not exist')
    array = values[0]
    ctx.fail_if(len(values) > 1 or not isinstance(array, list), f'"{array_path}" is not an array')
    for index, element in enumerate(array):
        if compare(ctx, element, expected_element).ok:
            return f"element [{index}] matches {snippet(expected_element)}"
    ctx.fail(f"no element of {array_path} ({len(array)} items) matches {snippet(expected_element)}")


@testfunction(description="the number of values at the key path (or items of the array there)")
def value_count(
    ctx: TestContext, dst: str, key_path: str, expected_count: int | dict[str, int] | None = None
) -> str:
    low, high = count_range(ctx, expected_count)
    values = _values(ctx, dst, key_path)
    count = (
        len(values[0]) if len(values) == 1 and isinstance(values[0], (list, dict)) else len(values)
    )
    wanted = describe_range(low, high)
    ctx.fail_if(not low <= count <= high, f'"{key_path}" has {count} value(s), expected {wanted}')
    return f'"{key_path}" has {count} value(s) ({wanted})'
