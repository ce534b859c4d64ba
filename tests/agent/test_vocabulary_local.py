"""The test vocabulary for real, without a VM: the agent as its own process on a private
Xvfb, a Tk window with labels that logs every click it gets, the host's OCR reading the
agent's screenshots, and the facade's waits over a real WebSocket."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_adare.errors import (
    AdareError,
    CommandFailed,
    CommandSucceeded,
    GuestWaitTimeout,
    ToolError,
)
from pytest_adare.guest import Guest
from pytest_adare.screen.text import TextNotFound, TextStillShown
from tests.integration.private_display import private_display
from tests.local_agent import free_port, local_agent_guest

pytestmark = pytest.mark.gui

TOKEN = "vocabulary-test-token"
WAIT = 30.0

# Two "Delete" labels (one above the other), a "Keep" label and a "Dismiss" button that
# removes the "Keep" label; every click is logged as "<label> <button> <count>".
WINDOW = r"""
import sys, tkinter as tk
log = open(sys.argv[1], "a", buffering=1)
root = tk.Tk()
root.title("Vocabulary probe")
root.geometry("600x400+50+50")
root.configure(background="white")
font = ("DejaVu Sans", 28)
def label(text, name, x, y):
    widget = tk.Label(root, text=text, font=font, background="white", foreground="black")
    widget.place(x=x, y=y)
    widget.bind("<ButtonRelease>", lambda e: log.write(f"{name} {e.num} 1\n"))
    widget.bind("<Double-Button-1>", lambda e: log.write(f"{name} 1 2\n"))
    return widget
label("Delete", "upper", 40, 40)
label("Delete", "lower", 40, 260)
keep = label("Keep", "keep", 360, 150)
def dismiss(event):
    keep.place_forget()
    log.write("dismissed\n")
label("Dismiss", "dismiss", 330, 300).bind("<ButtonRelease-1>", dismiss, add="+")
root.after(100, lambda: log.write("ready\n"))
root.mainloop()
"""


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    """A private Xvfb (it picks its display number), 1024x768."""
    with private_display() as number:
        yield number


@pytest.fixture(scope="module")
def desk(display: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    """The real agent as its own process on ``display``, driven through the facade."""
    run_dir = tmp_path_factory.mktemp("run")
    with local_agent_guest(run_dir, TOKEN, {"DISPLAY": display}) as guest:
        yield guest


class Window:
    """The Tk window of :data:`WINDOW` and its click log."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def clicks(self) -> list[str]:
        return self.log.read_text().splitlines()[1:] if self.log.exists() else []

    def wait_for_click(self, line: str) -> None:
        deadline = time.monotonic() + WAIT
        while line not in self.clicks():
            assert time.monotonic() < deadline, f"the window never logged {line!r}: {self.clicks()}"
            time.sleep(0.05)


@pytest.fixture
def window(display: str, desk: Guest, tmp_path: Path) -> Iterator[Window]:
    log = tmp_path / "clicks.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", WINDOW, str(log)], env={**os.environ, "DISPLAY": display}
    )
    try:
        desk.wait_for_window("^Vocabulary probe$", timeout=WAIT)
        desk.wait_for_text("Keep", timeout=WAIT)
        yield Window(proc, log)
    finally:
        proc.kill()
        proc.wait(10)


def test_wait_for_window_returns_its_title_and_geometry(desk: Guest, window: Window) -> None:
    found = desk.wait_for_window(re.compile("probe$"), timeout=WAIT)
    assert found.title == "Vocabulary probe"
    assert (found.x, found.y, found.width, found.height) == (50, 50, 600, 400)


def test_wait_for_window_times_out_naming_the_titles_it_saw(desk: Guest, window: Window) -> None:
    with pytest.raises(GuestWaitTimeout, match="a window titled 'Nowhere'") as raised:
        desk.wait_for_window("Nowhere", timeout=1.0)
    assert "'Vocabulary probe'" in raised.value.last


def test_find_text_returns_every_match_in_reading_order(desk: Guest, window: Window) -> None:
    upper, lower = desk.find_text("Delete")
    assert upper.y < lower.y and abs(upper.x - lower.x) < 10
    assert desk.find_text("delete") == []
    assert [m.text for m in desk.find_text("delete", ignore_case=True)] == ["Delete", "Delete"]


def test_max_distance_forgives_misreads(desk: Guest, window: Window) -> None:
    assert desk.find_text("Dismisss") == []
    [match] = desk.find_text("Dismisss", max_distance=1)
    assert match.text == "Dismiss" and match.distance == 1


def test_click_text_picks_the_nth_match_or_the_nearest(desk: Guest, window: Window) -> None:
    desk.click_text("Delete", timeout=WAIT, index=2)
    window.wait_for_click("lower 1 1")
    desk.click_text("Delete", timeout=WAIT, near=(0, 0))
    window.wait_for_click("upper 1 1")
    assert window.clicks() == ["lower 1 1", "upper 1 1"]


def test_click_text_right_and_double_clicks(desk: Guest, window: Window) -> None:
    desk.click_text("Keep", timeout=WAIT, button="right")
    window.wait_for_click("keep 3 1")
    desk.click_text("Keep", timeout=WAIT, clicks=2)
    window.wait_for_click("keep 1 2")
    with pytest.raises(ValueError, match="button must be"):
        desk.click_text("Keep", button="back")  # type: ignore[arg-type]


def test_wait_for_text_gone_waits_until_it_is_read_nowhere(desk: Guest, window: Window) -> None:
    with pytest.raises(TextStillShown, match=r"'Keep' still read on screen after 1\.0 s"):
        desk.wait_for_text("Keep", timeout=1.0, gone=True)
    desk.click_text("Dismiss", timeout=WAIT)
    window.wait_for_click("dismissed")
    assert desk.wait_for_text("Keep", timeout=WAIT, gone=True) is None
    with pytest.raises(TextNotFound, match=r"'Keep' not read on screen within 1\.0 s"):
        desk.wait_for_text("Keep", timeout=1.0)


def test_a_blank_screen_reads_as_no_text(desk: Guest, display: str) -> None:
    # No window on the Xvfb: its root window is black, the case tesserocr 2.13 crashed on.
    assert desk.screen_text() == ""
    assert desk.find_text("anything") == []
    with pytest.raises(TextNotFound, match=r"\(no text\)"):
        desk.wait_for_text("anything", timeout=1.0)


def test_succeed_and_fail_return_output_or_raise(desk: Guest) -> None:
    assert desk.succeed("echo hello") == "hello\n"
    with pytest.raises(CommandFailed) as failed:
        desk.succeed("echo out; echo err >&2; exit 4")
    assert (failed.value.returncode, failed.value.stdout, failed.value.stderr) == (
        4, "out\n", "err\n",
    )  # fmt: skip
    assert desk.fail("ls /nonexistent-path").returncode != 0
    with pytest.raises(CommandSucceeded, match="expected to fail"):
        desk.fail("true")


def test_a_shell_timeout_is_the_agents_and_ends_the_command(desk: Guest) -> None:
    # The agent enforces it (the host waits a grace longer): its answer, not a host
    # timeout, and the command is gone.
    with pytest.raises(ToolError, match=r"command timed out after 2 s; process group killed"):
        desk.shell("sleep 37.25", timeout=2)
    desk.wait_until_fails("pgrep -fx 'sleep 37.25'", timeout=WAIT)
    with pytest.raises(GuestWaitTimeout, match=r"'sleep 37\.5' to succeed") as waited:
        desk.wait_until_succeeds("sleep 37.5", timeout=2)
    assert "command timed out" in waited.value.last


def test_wait_until_succeeds_returns_the_run_that_succeeded(desk: Guest, tmp_path: Path) -> None:
    counter = tmp_path / "tries"
    command = f"echo x >> {counter}; [ $(wc -l < {counter}) -ge 3 ] && echo third"
    result = desk.wait_until_succeeds(command, timeout=WAIT)
    assert result.stdout == "third\n"
    assert counter.read_text() == "x\nx\nx\n"


def test_wait_until_fails_and_a_timeout_shows_the_last_run(desk: Guest, tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    flag.touch()
    with subprocess.Popen(["sh", "-c", f"sleep 0.5; rm {flag}"]):
        assert desk.wait_until_fails(f"test -e {flag}", timeout=WAIT).returncode == 1
    with pytest.raises(GuestWaitTimeout) as raised:
        desk.wait_until_succeeds("echo not yet; exit 7", timeout=0.5)
    assert "'echo not yet; exit 7' to succeed" in str(raised.value)
    assert "exit code 7" in raised.value.last and "not yet" in raised.value.last
    assert raised.value.attempts >= 2


def test_wait_for_file_and_wait_for_port(desk: Guest, tmp_path: Path) -> None:
    target = tmp_path / "late.txt"
    with subprocess.Popen(["sh", "-c", f"sleep 0.5; echo x > {target}"]):
        assert desk.wait_for_file(str(target), timeout=WAIT) == str(target)
    with pytest.raises(GuestWaitTimeout, match="the file /nonexistent"):
        desk.wait_for_file("/nonexistent", timeout=0.3)

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',"
         f"{port})); time.sleep(0.5); s.listen(); time.sleep(60)"]
    )  # fmt: skip
    try:
        desk.wait_for_port(port, timeout=WAIT)
    finally:
        server.kill()
        server.wait()
    desk.wait_for_port(port, timeout=WAIT, closed=True)
    with pytest.raises(GuestWaitTimeout, match=f"TCP port {port} to listen"):
        desk.wait_for_port(port, timeout=0.3)


def test_wait_for_unit_on_a_guest_without_systemd(desk: Guest) -> None:
    if Path("/run/systemd/system").is_dir():
        pytest.skip("this host runs systemd")  # adare-skip: the e2e distro disk covers systemd
    with pytest.raises(Exception, match="does not run systemd"):
        desk.wait_for_unit("ssh.service", timeout=5)
    with pytest.raises(AdareError, match=r"journal\(\): the guest does not run systemd"):
        desk.journal(unit="ssh.service")


def test_now_is_the_guests_clock_and_idle_lets_time_pass(desk: Guest) -> None:
    before = desk.now()
    assert before.tzinfo is not None
    assert abs((before - datetime.now(timezone.utc)).total_seconds()) < 5
    desk.idle(0.5)
    assert (desk.now() - before).total_seconds() >= 0.5
    with pytest.raises(ValueError, match=r"0\.\.3600"):
        desk.idle(-1)
