"""The agent process: WebSocket listener first, serial link after; a failed bind keeps serial."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LISTENING = "adare_guest.server: listening on"
SERIAL_UP = "serial link on"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def pty_device() -> Iterator[str]:
    """A real pseudo-terminal the agent can use as its serial device."""
    controller, device = os.openpty()
    try:
        yield os.ttyname(device)
    finally:
        os.close(controller)
        os.close(device)


def _run_until(argv: list[str], log: Path, wanted: list[str], timeout: float) -> list[str]:
    """Run the agent until every ``wanted`` text is in its log; returns the log lines."""
    with subprocess.Popen(  # leaving the block closes the stderr pipe
        [sys.executable, "-m", "adare_guest", *argv, "--log-file", str(log)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                lines = log.read_text().splitlines() if log.exists() else []
                if all(any(w in line for line in lines) for w in wanted):
                    return lines
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
                time.sleep(0.05)
            raise AssertionError(f"agent log never showed {wanted} within {timeout} s: {lines}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


def _first(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


def test_websocket_listens_before_the_serial_link_starts(tmp_path: Path, pty_device: str) -> None:
    argv = [str(tmp_path), "--host", "127.0.0.1", "--port", "0", "--serial", pty_device]
    lines = _run_until(argv, tmp_path / "agent.log", [LISTENING, SERIAL_UP], timeout=60)
    assert _first(lines, LISTENING) < _first(lines, SERIAL_UP)


def test_a_port_in_use_still_brings_the_serial_link_up(tmp_path: Path, pty_device: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [str(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--serial", pty_device]
        lines = _run_until(argv, tmp_path / "agent.log", ["cannot listen", SERIAL_UP], timeout=60)
    assert not any(LISTENING in line for line in lines)
