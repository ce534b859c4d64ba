"""``stop``/``continue`` conditions on a variable: equals, contains, matches, greater_than,
less_than, is_empty (adare's ``VariableCondition``; exactly one operator, checked when
the playbook is read)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_adare.playbook.schema import CONDITION_OPERATORS


class ConditionProblem(ValueError):
    """The condition cannot be evaluated (an undefined variable, a bad pattern)."""


def is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, dict, tuple)) and len(value) == 0)


def condition_holds(condition: Mapping[str, Any], variables: Mapping[str, Any]) -> bool:
    """Whether ``condition`` holds for the current ``variables``.

    An undefined variable is empty (``is_empty: true`` holds) and fails every other
    operator with :class:`ConditionProblem`, as a typo must not pass silently.
    """
    name = str(condition["variable"])
    operator = next(op for op in CONDITION_OPERATORS if op in condition)
    expected = condition[operator]
    if name not in variables:
        if operator == "is_empty":
            return bool(expected)
        raise ConditionProblem(f"variable {name!r} is not defined")
    value = variables[name]
    if operator == "is_empty":
        return is_empty(value) == bool(expected)
    if operator == "equals":
        return bool(
            value == expected
            or (
                not isinstance(value, str)
                and str(value) == str(expected)
                and not isinstance(expected, bool)
            )
        )
    if operator == "contains":
        return str(expected) in str(value)
    if operator == "matches":
        try:
            return re.search(str(expected), str(value)) is not None
        except re.error as error:
            raise ConditionProblem(f"matches: bad pattern {expected!r}: {error}") from None
    try:
        number, bound = float(value), float(expected)
    except (TypeError, ValueError):
        raise ConditionProblem(f"{operator}: {name} is {value!r}, not a number") from None
    return number > bound if operator == "greater_than" else number < bound
