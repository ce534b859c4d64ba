"""File tools against a hostile guest (issue 12, defect 1; issue 15's result fixes).

Malware can swap a file for a FIFO between the agent's check and its ``open``: an
``open`` of a FIFO without a writer blocks for ever. The swap is made to happen
exactly at the agent's open here, so the race is hit every time, not 6 in 9,000.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from adare_guest.tools import files

ANSWER_BOUND = 10.0
"""Seconds within which a call touching a swapped-in FIFO must be answered."""
REPO = Path(__file__).resolve().parents[2]


class FifoSwap:
    """Replaces ``target`` with a FIFO right before the agent opens it."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.swapped = False

    def swap(self, path: Any) -> None:
        if not self.swapped and os.fspath(path) == str(self.target):
            self.swapped = True
            self.target.unlink()
            os.mkfifo(self.target)

    def release(self) -> None:
        """Unblock a reader stuck on the FIFO (an unfixed agent), by opening its write end."""
        if self.swapped:
            with contextlib.suppress(OSError):
                os.close(os.open(self.target, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def fifo_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FifoSwap]:
    """A regular file that turns into a FIFO between any check and the agent's open."""
    target = tmp_path / "victim.bin"
    target.write_bytes(b"x" * 5000)
    swap = FifoSwap(target)
    real_open: Callable[..., Any] = open
    real_os_open = os.open

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        swap.swap(path)
        return real_os_open(path, flags, *args, **kwargs)

    def builtin_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        swap.swap(path)
        return real_open(path, *args, **kwargs)

    names = [name for name in dir(os) if not name.startswith("__")]
    proxy = SimpleNamespace(**{name: getattr(os, name) for name in names})
    proxy.open = os_open
    monkeypatch.setattr(files, "os", proxy)
    monkeypatch.setattr(files, "open", builtin_open, raising=False)
    try:
        yield swap
    finally:
        swap.release()


@pytest.mark.asyncio
async def test_a_file_swapped_for_a_fifo_before_a_pull_is_refused_at_once(
    client: Any, fifo_swap: FifoSwap
) -> None:
    started = time.monotonic()
    call = await client.send_call("pull_file_chunk", {"guest_path": str(fifo_swap.target)})
    try:
        answer = await client.result(call, ANSWER_BOUND)
    except TimeoutError:
        pytest.fail(f"pull of a file swapped for a FIFO not answered within {ANSWER_BOUND} s")
    assert fifo_swap.swapped
    result = answer["result"]
    assert result["status"] == "error" and "a FIFO, not a regular file" in result["message"]
    assert result["error"] == result["message"]
    assert time.monotonic() - started < ANSWER_BOUND
    assert (await client.ok("get_timestamp"))["status"] == "success"


@pytest.mark.asyncio
async def test_a_snapshot_hashing_a_file_swapped_for_a_fifo_completes(
    client: Any, fifo_swap: FifoSwap
) -> None:
    call = await client.send_call(
        "get_filesystem_snapshot", {"root_path": str(fifo_swap.target.parent), "hash": True}
    )
    try:
        answer = await client.result(call, ANSWER_BOUND)
    except TimeoutError:
        pytest.fail(f"snapshot with a swapped-in FIFO not answered within {ANSWER_BOUND} s")
    result = answer["result"]
    assert result["complete"] is True
    assert any("not a regular file" in e["error"] for e in result["errors"])
    assert "sha256" not in result["snapshot"][str(fifo_swap.target)]


@pytest.mark.asyncio
async def test_pulling_a_fifo_socket_or_device_answers_with_its_kind(
    client: Any, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (Path("/dev/null"), "a character device")):
        result = await client.ok("pull_file_chunk", guest_path=str(path))
        assert result["status"] == "error" and f"is {kind}, not a regular file" in result["message"]
    directory = await client.ok("pull_file_chunk", guest_path=str(tmp_path))
    assert directory["is_directory"] is True and directory["error"] == directory["message"]


@pytest.mark.asyncio
async def test_a_pull_through_a_symlink_reads_its_target(client: Any, tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"content")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = await client.ok("pull_file_chunk", guest_path=str(tmp_path / "link"))
    assert result["status"] == "success" and result["file_size"] == 7


def replace_with_symlink(pattern: str, directory: Path, target: Path) -> None:
    (found,) = directory.glob(pattern)
    found.unlink()
    found.symlink_to(target)


def contents(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


@pytest.mark.asyncio
async def test_a_push_does_not_append_through_a_temp_file_swapped_for_a_symlink(
    client: Any, tmp_path: Path
) -> None:
    target, victim = tmp_path / "uploaded", tmp_path / "victim"
    victim.write_bytes(b"precious")
    first = await client.ok(
        "push_file_chunk", guest_path=str(target), chunk_index=0, chunk_data="YWJj", total_chunks=2
    )
    assert first["status"] == "success"
    replace_with_symlink(".uploaded.adare-part-*", tmp_path, victim)
    second = await client.ok(
        "push_file_chunk", guest_path=str(target), chunk_index=1, chunk_data="ZGVm", total_chunks=2
    )
    assert second["status"] == "error" and second["error"] == second["message"]
    assert (contents(victim), contents(target)) == (b"precious", None)


STUCK_THREAD_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from adare_guest.config import AgentConfig
    from adare_guest.tools.base import AgentState, CallContext

    fifo = sys.argv[1]
    os.mkfifo(fifo)

    async def main():
        ctx = CallContext(call_id="c", tool="t", timeout=1, config=AgentConfig(),
                          state=AgentState())
        # open() of a FIFO nobody writes to blocks for ever: a stuck worker thread.
        task = asyncio.ensure_future(ctx.run_in_thread(lambda: open(fifo, "rb")))
        await asyncio.sleep(0.5)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        print("cancelled", flush=True)

    asyncio.run(main())
    """
)


def test_a_worker_thread_stuck_for_good_does_not_keep_the_agent_from_exiting(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK_THREAD_SCRIPT, str(tmp_path / "fifo")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=ANSWER_BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"process with a stuck worker thread did not exit within {ANSWER_BOUND} s")
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "cancelled"


@pytest.mark.asyncio
async def test_a_stuck_worker_thread_is_abandoned_and_later_work_still_runs() -> None:
    from adare_guest.worker_pool import WorkerPool

    pool = WorkerPool(max_workers=1)
    loop = asyncio.get_running_loop()
    blocker = SimpleNamespace(done=False)

    def stuck() -> None:
        while not blocker.done:
            time.sleep(0.01)

    started = asyncio.Event()
    ended = asyncio.Event()

    workers: list[threading.Thread] = []

    def stuck_then_flag() -> None:
        workers.append(threading.current_thread())
        loop.call_soon_threadsafe(started.set)
        stuck()
        loop.call_soon_threadsafe(ended.set)

    task = asyncio.ensure_future(pool.run(stuck_then_flag))
    # A job counts as abandoned only once a thread runs it: cancel after it started.
    await asyncio.wait_for(started.wait(), ANSWER_BOUND)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert pool.abandoned == 1
    assert await asyncio.wait_for(pool.run(lambda: 42), ANSWER_BOUND) == 42
    blocker.done = True
    await asyncio.wait_for(ended.wait(), ANSWER_BOUND)
    # The abandoned thread counts itself out after its function returns, then ends.
    await loop.run_in_executor(None, workers[0].join, ANSWER_BOUND)
    assert not workers[0].is_alive()
    assert pool.abandoned == 0


@pytest.mark.asyncio
async def test_local_time_reports_the_utc_offset_and_the_zone_name(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        result = await client.ok("get_timestamp", use_local=True)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert result["timezone"] == "+05:30"
    assert result["timezone_name"] == result["local_timezone"] == "IST"
    assert result["utc_offset_seconds"] == 19800
    utc = await client.ok("get_timestamp")
    assert utc["timezone"] == "UTC"
    assert files.utc_offset_text(-files.dt.timedelta(hours=3, minutes=30)) == "-03:30"
    assert files.utc_offset_text(files.dt.timedelta(0)) == "+00:00"


@pytest.mark.asyncio
async def test_every_error_result_carries_error_as_well_as_message(client: Any) -> None:
    missing = await client.ok("pull_file_chunk", guest_path="/nonexistent/adare")
    assert missing["status"] == "error" and missing["error"] == missing["message"]
    chained = await client.ok(
        "chain_commands", commands=[{"tool": "pull_file_chunk", "params": {"guest_path": "/nx"}}]
    )
    step = chained["results"][0]["result"]
    assert step["status"] == "error" and step["error"] == step["message"]
    assert chained["error"] == chained["message"]
