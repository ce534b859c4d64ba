"""Console output from a hostile (or dying) guest: linear cost, cut lines, a bounded log,
and the line that says what killed the guest kept in front of the tail."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from pytest_adare.machine.console import MAX_LINE_CHARS, ConsoleCapture

READ = 4096


@pytest.mark.asyncio
async def test_megabytes_without_a_newline_cost_linear_time(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log")
    waiter = capture.wait_for(r"login: $")
    chunk = b"A" * READ
    started = time.perf_counter()
    for _ in range(8 * 2**20 // READ):  # 8 MiB: 10 s with re-splitting the whole line
        capture.data_received(chunk)
    elapsed = time.perf_counter() - started
    capture.data_received(b"\nlogin: ")
    capture.connection_lost(None)
    assert elapsed < 1.5, f"8 MiB without a newline took {elapsed:.1f} s"
    assert (await asyncio.wait_for(waiter, 1)).string == "login: "


@pytest.mark.asyncio
async def test_a_long_line_is_cut_and_marked(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log", max_line_chars=10)
    capture.data_received(b"0123456789abc")
    assert capture.tail(1) == ["0123456789…[cut 3 characters]"]
    capture.data_received(b"def\nshort\n")
    capture.connection_lost(None)
    assert capture.tail(2) == ["0123456789…[cut 6 characters]", "short"]


@pytest.mark.asyncio
async def test_default_line_limit_holds_in_the_tail(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log")
    capture.data_received(b"x" * (3 * MAX_LINE_CHARS) + b"\n")
    capture.connection_lost(None)
    (line,) = capture.tail(1)
    assert line == "x" * MAX_LINE_CHARS + f"…[cut {2 * MAX_LINE_CHARS} characters]"


@pytest.mark.asyncio
async def test_a_waiter_matches_later_lines_after_a_cut_one(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log", max_line_chars=12)
    waiter = capture.wait_for("ready", since=capture.mark())
    capture.data_received(b"y" * 100)
    await asyncio.sleep(0)
    assert not waiter.done()
    capture.data_received(b"\nboot ready\n")
    capture.connection_lost(None)
    assert (await asyncio.wait_for(waiter, 1)).string == "boot ready"


@pytest.mark.asyncio
async def test_the_log_file_stops_at_its_bound_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    capture = ConsoleCapture(log, max_log_bytes=1000)
    for _ in range(10):
        capture.data_received(b"z" * 299 + b"\n")
    capture.connection_lost(None)
    text = log.read_bytes()
    assert text.startswith(b"z" * 299 + b"\n")
    assert text.endswith(
        b"\n[console.log stops at 1000 bytes (the host's bound); "
        b"2000 more bytes were not written]\n"
    )
    assert capture.tail(1) == ["z" * 299], "the ring still has the latest lines"


PANIC = [
    "[   41.2] sysrq: Trigger a crash",
    "[   41.2] Kernel panic - not syncing: sysrq triggered crash",
    "[   41.2] CPU: 0 PID: 312 Comm: sh Not tainted 6.1.0-13-amd64",
    *[f"[   41.3]  trace_{i}+0x12/0x40" for i in range(200)],
    "[   41.9] ---[ end Kernel panic - not syncing: sysrq triggered crash ]---",
]


@pytest.mark.asyncio
async def test_a_panic_leads_the_tail_after_its_call_trace_scrolled_it_out(
    tmp_path: Path,
) -> None:
    capture = ConsoleCapture(tmp_path / "console.log")
    capture.data_received("".join(f"boot line {i}\n" for i in range(50)).encode())
    capture.data_received(("\n".join(PANIC) + "\n").encode())
    capture.connection_lost(None)
    tail = capture.tail(40)
    assert tail[0] == (
        "== what killed the guest, from console line 52: "
        "Kernel panic - not syncing: sysrq triggered crash"
    )
    assert tail[1:4] == ["boot line 49", PANIC[0], PANIC[1]]
    assert tail[4:10] == PANIC[2:8]
    assert tail[10] == "== the last 40 console lines:"
    assert tail[11:] == PANIC[-40:]


@pytest.mark.parametrize(
    "line",
    [
        "[    3.1] BUG: kernel NULL pointer dereference, address: 0000000000000000",
        "[    3.1] Oops: 0002 [#1] PREEMPT SMP NOPTI",
        "[    3.1] Out of memory: Killed process 77 (hog) total-vm:1048576kB",
    ],
)
@pytest.mark.asyncio
async def test_oops_bug_and_oom_kill_lead_the_tail_too(tmp_path: Path, line: str) -> None:
    capture = ConsoleCapture(tmp_path / "console.log")
    capture.data_received(f"before\n{line}\n".encode() + b"noise\n" * 100)
    capture.connection_lost(None)
    tail = capture.tail(5)
    assert tail[0].startswith("== what killed the guest, from console line 2: ")
    assert tail[1:3] == ["before", line]
    assert tail[-5:] == ["noise"] * 5


@pytest.mark.asyncio
async def test_a_healthy_console_tail_is_just_the_last_lines(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log")
    capture.data_received(b"Debian GNU/Linux 12 ttyS0\nOopsie daisy: a user program\nlogin: ")
    capture.connection_lost(None)
    assert capture.fatal_lines() == []
    assert capture.tail(2) == ["Oopsie daisy: a user program", "login: "]


@pytest.mark.asyncio
async def test_a_restarted_machine_appends_within_the_same_bound(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    for _ in range(3):
        capture = ConsoleCapture(log, max_log_bytes=1000)
        capture.data_received(b"r" * 700)
        capture.connection_lost(None)
        capture.connection_lost(None)  # reported twice: harmless
    assert log.read_bytes().startswith(b"r" * 1000)
    assert log.stat().st_size < 1000 + 3 * 120, "each restart got a fresh 1000 bytes"
