"""Soft checks: ``adare_checks`` records verdicts through a test and fails it at the end.

A pytest ``assert`` stops at the first failure; a forensic scenario wants every
artifact's verdict (adare runs and reports every ``test:`` step of a playbook)::

    def test_trash(guest, adare_checks):
        ...
        adare_checks.run("the file is gone", "standard.file_does_not_exist", dst=path)
        adare_checks.check(info.exists(), "trash info written", detail=str(info))

Each check is recorded, never raised. When the call phase ends, every recorded check
is reported as one table (the report section ``adare checks`` and the JUnit property
``adare_checks``, JSON), and the test fails if any check failed, with the table as
its failure. It fails in its call phase, as an ``assert`` would, so a soft-check
failure gets the whole failure evidence (console, screenshot, film, artifacts) and
``--adare-pause-on-fail`` / ``--adare-keep`` act on it. A test that failed on its own
keeps its failure; the table is added. Verdicts and details (a guest function's) are
shown with their control characters escaped.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_adare.errors import printable

if TYPE_CHECKING:
    from pytest_adare.guest import Guest, TestOutcome

CHECKS_KEY = pytest.StashKey["SoftChecks"]()
PASSING_GUEST_STATUSES = frozenset({"SUCCESS", "WARNING"})
"""Guest verdicts that are not a failure (adare's WARNING reports without failing)."""
MAX_DETAIL = 500


@dataclass(frozen=True)
class Check:
    """One recorded verdict: ``passed``, and how the check put it (``verdict``)."""

    label: str
    passed: bool
    verdict: str
    details: str


class SoftChecks:
    """The ``adare_checks`` fixture: record checks now, fail the test at its end."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self.checks: list[Check] = []

    def check(self, condition: object, label: str, detail: str = "") -> bool:
        """Record a host-side verdict (``bool(condition)``); returns it."""
        passed = bool(condition)
        self._record(label, passed, "PASSED" if passed else "FAILED", detail)
        return passed

    def run(
        self, label: str, function: str, /, *, on: Guest | None = None, **params: Any
    ) -> TestOutcome | None:
        """Run the guest test function ``function`` (``collection.name``, stock or
        uploaded) with ``params`` on ``on`` (default: the test's ``guest``) and record
        its verdict; returns the outcome (None when the agent refused the call, which is
        recorded as ERROR with its message).

        Infrastructure errors (the VM died, the agent went away) are raised as usual.
        """
        # Deferred: the facade is part of the VM layer, loaded only with a VM.
        from pytest_adare.errors import ToolError

        guest: Guest = on if on is not None else self._request.getfixturevalue("guest")
        try:
            outcome = guest.run_test(function, **params)
        except ToolError as error:
            self._record(label, False, "ERROR", str(error))
            return None
        passed = outcome.status in PASSING_GUEST_STATUSES
        self._record(label, passed, outcome.status, "; ".join(outcome.details))
        return outcome

    @property
    def failed(self) -> list[Check]:
        """The checks that did not pass."""
        return [check for check in self.checks if not check.passed]

    def table(self) -> str:
        """Every check as a table: label, verdict, details."""
        width = max([len(check.label) for check in self.checks] + [5])
        lines = [f"{len(self.failed)} of {len(self.checks)} checks failed"]
        lines.append(f"  {'label':<{width}}  {'verdict':<7}  details")
        for check in self.checks:
            lines.append(f"  {check.label:<{width}}  {check.verdict:<7}  {check.details}")
        return "\n".join(lines)

    def _record(self, label: str, passed: bool, verdict: str, details: str) -> None:
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"a check needs a label (non-empty text), got {label!r}")
        shown = printable(" ".join(details.split()))
        if len(shown) > MAX_DETAIL:
            shown = shown[:MAX_DETAIL] + " [...]"
        # A guest function's verdict and details are the guest's text: they reach the
        # terminal in the table, so no ESC or BEL of theirs does.
        label = printable(" ".join(label.split()))
        self.checks.append(Check(label, passed, printable(verdict), shown))


@pytest.fixture
def adare_checks(request: pytest.FixtureRequest) -> SoftChecks:
    """Soft checks for this test (see :mod:`pytest_adare.plugin.checks`)."""
    checks = SoftChecks(request)
    request.node.stash[CHECKS_KEY] = checks
    return checks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A failed check fails the call phase itself, so the reports of a failure (the
    evidence, the film, a pause, a kept VM) all see a failed test."""
    result = yield  # the test's own failure propagates as it is
    checks = item.stash.get(CHECKS_KEY, None)
    if checks is not None and checks.failed:
        pytest.fail(f"soft checks failed: {checks.table()}", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    checks = item.stash.get(CHECKS_KEY, None)
    if call.when != "call" or checks is None or not checks.checks:
        return report
    table = checks.table()
    report.sections.append(("adare checks", table))
    # The teardown report copies the item's properties: that is the one JUnit reads.
    item.user_properties.append(("adare_checks", json.dumps([asdict(c) for c in checks.checks])))
    return report
