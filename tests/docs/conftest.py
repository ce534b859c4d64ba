"""The docs examples' sessions, and a summary of what ran and what was skipped, and why."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from doc_examples import all_blocks
from doc_sessions import ExampleSessions

_outcomes: dict[str, tuple[str, str]] = {}  # block id -> (outcome, skip reason)
_started: list[float] = []
_sessions: list[ExampleSessions] = []


@pytest.fixture(scope="session")
def example_sessions() -> Iterator[ExampleSessions]:
    # The example project where a user's checkout is: in a directory others may enter
    # (pytest's own temporary root is closed to them), as docs/runtime.md's writable
    # share asks of the folders above it.
    workdir = Path(tempfile.mkdtemp(prefix="adare-docs-examples-", dir="/tmp"))
    workdir.chmod(0o755)
    sessions = ExampleSessions(all_blocks(), workdir)
    _sessions.append(sessions)
    try:
        yield sessions
    finally:
        for session in sessions.sessions.values():
            session.stop()
        if not any(outcome == "failed" for outcome, _ in _outcomes.values()):
            shutil.rmtree(workdir, ignore_errors=True)  # else kept: the sessions' logs


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "test_doc_examples.py::test_doc_example[" not in report.nodeid:
        return
    _started.append(time.monotonic())
    block_id = report.nodeid.split("[", 1)[1].rstrip("]")
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        _outcomes[block_id] = ("skipped", reason.removeprefix("Skipped: "))
    elif report.failed or (report.when == "call" and block_id not in _outcomes):
        _outcomes[block_id] = (report.outcome, "")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    counts = Counter(outcome for outcome, _ in _outcomes.values())
    tr = terminalreporter
    tr.section("docs examples")
    tr.line(f"{len(_outcomes)} blocks: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped (cannot run on this machine); "
            f"{_started[-1] - _started[0]:.0f} s")
    for sessions in _sessions:
        for image, session in sessions.sessions.items():
            if session.returncode is not None:
                tr.line(f"  pytest --adare-vm={image}: {len(session.tests)} blocks, "
                        f"{session.seconds:.0f} s")
    reasons = Counter(reason for outcome, reason in _outcomes.values() if outcome == "skipped")
    for reason, count in reasons.most_common():
        tr.line(f"  skipped {count}x: {reason}")
