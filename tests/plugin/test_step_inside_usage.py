"""Stepping inside, refused where it cannot work (no VM boots).

``--adare-pause-on-fail`` without a terminal to wait for Enter on (a run with no
controlling tty), in CI (``CI=true``, even on a pseudo-terminal) and under xdist
(workers have none, and one paused worker would hold the run), and an
``--adare-keep-idle`` that is no positive number of minutes: pytest stops with a usage
error that says why, before any test runs. ``guest.breakpoint()`` follows the same rules:
in CI or in an xdist worker, on a terminal, it fails its test saying why instead of
waiting forever (the guest: a real agent on this host).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.terminal_checks import PtyProcess

A_TEST = "def test_nothing():\n    pass\n"


def run_detached(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a session of its own: no controlling terminal, so no ``/dev/tty``.

    ``CI`` is left out (CI sets it), or the CI rule would answer before the terminal's.
    """
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL, start_new_session=True, env=env,
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


def on_a_terminal(directory: Path, *args: str, ci: str | None) -> PtyProcess:
    """pytest with a pseudo-terminal as its terminal (``/dev/tty`` opens), ``CI`` as given."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return PtyProcess(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], directory, env
    )


def test_in_ci_the_option_is_a_usage_error_even_on_a_terminal(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=A_TEST)
    run = on_a_terminal(pytester.path, "--adare-pause-on-fail", ci="true")
    try:
        run.expect(rb"--adare-pause-on-fail cannot pause in CI \(CI='true'\)")
        assert run.wait() == pytest.ExitCode.USAGE_ERROR
        assert b"passed" not in run.output
    finally:
        run.kill()


A_BREAKPOINT = """
from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.loop_thread import shared_loop


def test_stops_at_a_breakpoint(tmp_path):
    loop = shared_loop()
    agent = AdareVMServer(AgentConfig(host="127.0.0.1", port=0, run_dir=tmp_path, token="t"))
    _, port = loop.run(agent.start(), 30)
    client = loop.run(AgentClient.connect("127.0.0.1", port, "t"), 30)
    try:
        guest = Guest(AsyncGuest(client))
        assert guest.shell("echo here").stdout == "here\\n"
        guest.breakpoint()
    finally:
        loop.run(client.close(), 30)
        loop.run(agent.stop(), 30)
"""


@pytest.mark.parametrize(
    ("args", "ci", "why"),
    [
        ((), "true", rb"guest.breakpoint\(\) cannot pause in CI \(CI='true'\)"),
        (("-n", "1"), None, rb"guest.breakpoint\(\) cannot be used with xdist \(-n\)"),
    ],
    ids=["ci", "xdist-worker"],
)
def test_a_breakpoint_that_cannot_pause_fails_its_test_instead_of_waiting(
    pytester: pytest.Pytester, args: tuple[str, ...], ci: str | None, why: bytes
) -> None:
    """It printed the pause's hint and waited for an Enter nobody would press."""
    if args:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_bp=A_BREAKPOINT)
    run = on_a_terminal(pytester.path, *args, "-q", "test_bp.py", ci=ci)
    try:
        run.expect(rb"1 failed", 120)
        assert run.wait() == pytest.ExitCode.TESTS_FAILED
        assert re.search(why, run.output), run.output[-2000:]
        assert b"adare: paused" not in run.output
    finally:
        run.kill()
