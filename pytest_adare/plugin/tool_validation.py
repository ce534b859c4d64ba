"""Forensic tool validation in pytest: the ``ground_truth`` fixture, its table in the
test's report, and ``adare-tools.json`` / ``adare-tools.md`` at the end of the session.

``--adare-tool=REQUIREMENT`` (repeatable) runs a test's analysis step once per tool
version (:mod:`pytest_adare.analysis.validation`); ``--adare-tools-baseline=OLD.json``
lists the verdicts that changed since an earlier run. Each test's report travels as a
user property, so under xdist the controller writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.plugin.fixtures import ITEM_VMS_KEY
from pytest_adare.plugin.matrix_summary import artifacts_root
from pytest_adare.plugin.options import adare_options

TOOLS_PROPERTY = "adare_tools"
TOOLS_JSON = "adare-tools.json"
TOOLS_MARKDOWN = "adare-tools.md"


@pytest.fixture
def ground_truth(request: pytest.FixtureRequest) -> Any:
    """What the scenario did, in the tool's terms (:class:`~pytest_adare.analysis.
    validation.ToolValidation`): ``ground_truth.expect(...)``, then
    ``ground_truth.validate(step, disk)`` scores each ``--adare-tool`` version."""
    # The analysis package is the plugin's only user of it: imported when asked for.
    from pytest_adare.analysis.validation import ToolValidation

    return ToolValidation(adare_options(request.config).tools)


@pytest.fixture
def adare_guest_vm(request: pytest.FixtureRequest, guest: Any) -> Any:
    """The :class:`~pytest_adare.vm.VM` the test's ``guest`` runs on (its marker's VM):
    for ``export_disk`` and ``disk_target``."""
    return next(p.vm for p in request.node.stash[ITEM_VMS_KEY] if p.vm.guest is guest)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        truth = getattr(item, "funcargs", {}).get("ground_truth")
        if truth is not None and truth.validations:
            # Deferred: a session without a ground truth never loads the analysis package.
            from pytest_adare.analysis.versions import validation_report, verdict_table

            report = validation_report(truth.validations)
            item.add_report_section("call", "adare tools", verdict_table(report))
            item.user_properties.append((TOOLS_PROPERTY, json.dumps(report)))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ToolReports(config), "adare-tool-reports")


class ToolReports:
    """Collects each test's tool report (its user property) and writes the session's."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reports: dict[str, Any] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == TOOLS_PROPERTY:
                self.reports[report.nodeid] = json.loads(str(value))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.reports or hasattr(self.config, "workerinput"):
            return
        # Deferred: a session without a ground truth never loads the analysis package.
        from pytest_adare.analysis.versions import baseline_changes, tools_markdown

        document: dict[str, Any] = {"tests": self.reports}
        baseline_path = adare_options(self.config).tools_baseline
        changes = None
        if baseline_path is not None:
            changes = baseline_changes(document, _read_baseline(baseline_path))
            document["baseline"] = {"file": str(baseline_path), "changes": changes}
        root = artifacts_root(self.config)
        root.mkdir(parents=True, exist_ok=True)
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        (root / TOOLS_JSON).write_text(text)
        (root / TOOLS_MARKDOWN).write_text(tools_markdown(document, changes))


def _read_baseline(path: Path) -> dict[str, Any]:
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise pytest.UsageError(f"--adare-tools-baseline: {path}: {error}") from None
    if not isinstance(old, dict) or not isinstance(old.get("tests"), dict):
        raise pytest.UsageError(f"--adare-tools-baseline: {path} is not an adare-tools.json")
    return old
