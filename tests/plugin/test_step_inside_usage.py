"""Stepping inside, refused at start where it cannot work (no VM boots).

``--adare-pause-on-fail`` without a terminal to wait for Enter on (CI, a run with no
controlling tty) and under xdist (workers have none, and one paused worker would hold
the run), and an ``--adare-keep-idle`` that is no positive number of minutes: pytest
stops with a usage error that says why, before any test runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

A_TEST = "def test_nothing():\n    pass\n"


def run_detached(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a session of its own: no controlling terminal, so no ``/dev/tty``."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def test_without_a_terminal_the_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=A_TEST)
    result = run_detached(pytester.path, "--adare-pause-on-fail")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--adare-pause-on-fail needs a terminal: cannot open /dev/tty" in result.stderr
    assert "passed" not in result.stdout


def test_the_ini_twin_is_refused_the_same_way(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=A_TEST)
    pytester.makeini("[pytest]\nadare_pause_on_fail = true\n")
    result = run_detached(pytester.path)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "needs a terminal" in result.stderr


def test_under_xdist_the_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_a=A_TEST)
    result = run_detached(pytester.path, "--adare-pause-on-fail", "-n", "2")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--adare-pause-on-fail cannot be used with xdist (-n)" in result.stderr
    assert "a paused worker would hold the whole run" in result.stderr


@pytest.mark.parametrize("idle", ["0", "-5", "soon"])
def test_a_keep_idle_that_is_no_positive_minutes_is_a_usage_error(
    pytester: pytest.Pytester, idle: str
) -> None:
    pytester.makepyfile(test_a=A_TEST)
    result = run_detached(pytester.path, f"--adare-keep-idle={idle}")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--adare-keep-idle" in result.stderr
