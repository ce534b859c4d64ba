"""An inner pytest run in a subprocess, bounded, that shows its own output when the bound
is reached.

``Pytester.runpytest_subprocess(timeout=...)`` kills the inner run at the bound and raises
``TimeoutExpired`` naming only the command: what the inner run was doing (which test,
which VM, its last progress line) stays in files under the test's directory, deleted
with it. This raises instead with the inner run's last lines, so a run that overran
says where its time went.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TAIL_LINES = 60


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a file, or a word saying it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"({path.name} could not be read: {exc})"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else f"({path.name} is empty)"


def run_inner_pytest(pytester: pytest.Pytester, *args: str, timeout: float) -> pytest.RunResult:
    """``pytester.runpytest_subprocess(*args)`` within ``timeout`` seconds; past it, the
    test fails with the inner run's last stdout and stderr lines."""
    try:
        return pytester.runpytest_subprocess(*args, timeout=timeout)
    except pytester.TimeoutExpired as exc:
        out = tail(pytester.path / "stdout")
        err = tail(pytester.path / "stderr", 20)
        pytest.fail(
            f"{exc}\n--- the inner run's last stdout lines ---\n{out}\n"
            f"--- its last stderr lines ---\n{err}",
            pytrace=False,
        )
