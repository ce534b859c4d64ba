"""A skip that the machine cannot explain fails the run (``scripts/test`` loads this
with ``-p tests.unexpected_skips``).

A green run with skips can hide a gap: a tool that ``scripts/setup`` forgot to
install turns its tests into skips, and nobody looks. Here a skip passes only when
its reason is on :data:`ALLOWED`, the short list of what these machines really lack;
any other skip is reported as a failure that names the skip and where it came from.
An expected failure (``xfail``) is not a skip and is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Generator

import pytest

ALLOWED: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Developers' machines and CI have no KVM: every VM runs under TCG.
    ("no KVM", re.compile(r"no (usable )?/dev/kvm")),
)
"""(why it is legitimate, the skip reasons it allows)."""

ALLOWED_MODULES: tuple[tuple[str, str], ...] = (
    # A docs example that cannot run here (a Windows image, a remote host, a CI
    # system's YAML) says so in the doc source, with its reason, and the docs summary
    # counts it: the doc is where that list is kept and reviewed.
    ("marked in the doc source", "tests/docs/test_doc_examples.py::"),
)
"""(why it is legitimate, the node id prefix whose skips are allowed)."""


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped report gives (``Skipped: `` dropped)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def allowed(nodeid: str, reason: str) -> bool:
    """Whether a skip of ``nodeid`` for ``reason`` is one these machines explain."""
    return any(pattern.search(reason) for _, pattern in ALLOWED) or any(
        nodeid.startswith(prefix) for _, prefix in ALLOWED_MODULES
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if allowed(report.nodeid, reason):
        return
    where = report.longrepr[:2] if isinstance(report.longrepr, tuple) else (item.nodeid, None)
    report.outcome = "failed"
    report.longrepr = (
        f"unexpected skip at {where[0]}:{where[1]}: {reason}\n"
        "scripts/test allows only skips these machines explain (tests/unexpected_skips.py: "
        + ", ".join(why for why, _ in (*ALLOWED, *ALLOWED_MODULES))
        + "); install what the test needs (scripts/setup) or fix the test"
    )
