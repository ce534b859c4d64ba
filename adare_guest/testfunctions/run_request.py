"""What a ``run_test`` call asks for, read from either request form.

Our form: ``test_name`` is the function (``collection.name``, a bare name means
``standard.name``) and ``resolved_test_data`` its keyword parameters, except
three run options taken out of it: ``variables`` (an object: per-call
placeholder variables), ``expect_to_fail`` (bool) and ``_VARIABLE_METADATA``
(an object of placeholder metadata).

adare's form: ``test_name`` is the playbook step's name and
``resolved_test_data`` is ``{"name", "description", "function", "parameter":
{...}, "expect_to_fail", "timeout", "_VARIABLE_METADATA", "variables"}``. A
request is read this way when ``resolved_test_data["function"]`` is a string and
it has no key outside that set.

``expect_to_fail`` swaps SUCCESS and FAILED (only those: an ERROR stays an
ERROR) and adds a line saying so, as adare does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adare_guest.testfunctions.functions import TestResult, TestStatus

__all__ = [
    "ADARE_KEYS",
    "RUN_OPTIONS",
    "BadRunRequest",
    "RunRequest",
    "apply_expect_to_fail",
    "parse_run_request",
]

ADARE_KEYS = frozenset(
    {
        "name",
        "description",
        "function",
        "parameter",
        "expect_to_fail",
        "timeout",
        "_VARIABLE_METADATA",
        "variables",
    }
)
"""Keys of adare's resolved test (its playbook ``Test`` plus the metadata)."""

RUN_OPTIONS = frozenset({"variables", "expect_to_fail", "_VARIABLE_METADATA"})
"""Keys of our form's ``resolved_test_data`` that are options, not parameters."""

EXPECTED_FAIL_AND_FAILED = "Expected to fail and did fail"
EXPECTED_FAIL_BUT_SUCCEEDED = "Expected to fail but succeeded"


class BadRunRequest(ValueError):
    """The request's options have the wrong shape (the message names the key)."""


@dataclass(frozen=True)
class RunRequest:
    """One ``run_test`` request, whichever form it came in."""

    step_name: str
    """What the caller called the run (reported in events and the message)."""
    function: str
    """The test function to run, as given (``collection.name`` or a bare name)."""
    params: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    expect_to_fail: bool = False
    timeout: float | None = None
    adare_form: bool = False


def is_adare_form(data: Mapping[str, Any]) -> bool:
    """True when ``data`` is adare's resolved test rather than our parameters."""
    return isinstance(data.get("function"), str) and set(data) <= ADARE_KEYS


def parse_run_request(test_name: str, data: Mapping[str, Any] | None) -> RunRequest:
    """Read ``run_test``'s ``test_name`` and ``resolved_test_data``.

    :raise BadRunRequest: an option or adare field of the wrong type.
    """
    data = dict(data or {})
    if is_adare_form(data):
        parameter = data.get("parameter")
        if parameter is not None and not isinstance(parameter, dict):
            raise BadRunRequest(f"parameter must be an object, got {type(parameter).__name__}")
        timeout = data.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0
        ):
            raise BadRunRequest(f"timeout must be a number of seconds > 0, got {timeout!r}")
        return RunRequest(
            step_name=test_name,
            function=data["function"],
            params=dict(parameter or {}),
            variables=_object(data, "variables"),
            metadata=_metadata(data),
            expect_to_fail=_flag(data, "expect_to_fail"),
            timeout=None if timeout is None else float(timeout),
            adare_form=True,
        )
    return RunRequest(
        step_name=test_name,
        function=test_name,
        params={k: v for k, v in data.items() if k not in RUN_OPTIONS},
        variables=_object(data, "variables"),
        metadata=_metadata(data),
        expect_to_fail=_flag(data, "expect_to_fail"),
    )


def _object(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRunRequest(f"{key} must be an object, got {type(value).__name__}")
    return dict(value)


def _metadata(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    metadata = _object(data, "_VARIABLE_METADATA")
    for name, entry in metadata.items():
        if not isinstance(entry, dict):
            raise BadRunRequest(
                f"_VARIABLE_METADATA[{name!r}] must be an object, got {type(entry).__name__}"
            )
    return metadata


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise BadRunRequest(f"{key} must be true or false, got {value!r}")
    return value


def apply_expect_to_fail(result: TestResult) -> TestResult:
    """SUCCESS ↔ FAILED with adare's explanatory line; other verdicts unchanged."""
    if result.status is TestStatus.SUCCESS:
        return TestResult(TestStatus.FAILED, [*result.details, EXPECTED_FAIL_BUT_SUCCEEDED])
    if result.status is TestStatus.FAILED:
        return TestResult(TestStatus.SUCCESS, [*result.details, EXPECTED_FAIL_AND_FAILED])
    return result
