"""The suite's bounded inner pytest run: past its bound it fails with the inner run's own
last lines, which ``Pytester.TimeoutExpired`` alone leaves in files deleted with the test."""

from __future__ import annotations

import pytest

from tests.inner_run import run_inner_pytest

STUCK = """
import sys, time

def test_stuck():
    print("inner progress: waiting for the guest's desktop", flush=True)
    print("inner stderr: still waiting", file=sys.stderr, flush=True)
    time.sleep(60)
"""


def test_an_overrun_shows_what_the_inner_run_was_doing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stuck=STUCK)
    with pytest.raises(pytest.fail.Exception) as failed:
        run_inner_pytest(pytester, "-s", "-p", "no:cacheprovider", timeout=8)
    message = str(failed.value)
    assert "8 second timeout expired" in message
    assert "inner progress: waiting for the guest's desktop" in message
    assert "inner stderr: still waiting" in message


def test_a_run_within_its_bound_is_returned(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_quick="def test_quick():\n    pass\n")
    run_inner_pytest(pytester, "-p", "no:cacheprovider", timeout=60).assert_outcomes(passed=1)
