"""A ``find`` listing frees its pipes when it is closed, finished or not (no fd leaks to the GC)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adare_guest import fs_listing

pytestmark = pytest.mark.asyncio


def _listing(root: str) -> tuple[fs_listing.FindListing, subprocess.Popen[bytes]]:
    if not fs_listing.find_prints():
        pytest.fail("this test needs GNU find with -printf on the host (findutils)")
    argv = fs_listing.find_argv(root, [], False, ())
    assert argv is not None
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    return fs_listing.FindListing("cursor", proc, deadline, b"", asyncio.to_thread), proc


async def test_a_finished_listing_closes_both_pipes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "file").write_bytes(b"x")
    listing, proc = _listing(str(tmp_path))
    records = b""
    while not listing.done:
        records += await listing.page(fs_listing.MAX_PAGE_BYTES)
    assert records.count(b"\0") == 4  # two entries: a record and a path each
    listing.close()
    assert proc.stdout is not None and proc.stdout.closed
    assert proc.stderr is not None and proc.stderr.closed


async def test_an_abandoned_listing_kills_find_and_closes_both_pipes() -> None:
    listing, proc = _listing("/usr")  # far more than one page: find is still writing
    assert await listing.page(1)
    assert not listing.done
    listing.close()
    assert proc.stdout is not None and proc.stdout.closed
    assert proc.stderr is not None and proc.stderr.closed
    assert await asyncio.to_thread(proc.wait, 30) != 0  # killed, not finished
    assert await listing.page(1) == b""  # a late page finds it closed, and no error


def _fake_find(script: str) -> fs_listing.FindListing:
    """A listing over a shell script in find's place (its stdout and stderr)."""
    proc = subprocess.Popen(
        ["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    return fs_listing.FindListing("cursor", proc, time.monotonic() + 60, b"", asyncio.to_thread)


async def test_find_errors_are_each_line_of_its_stderr_and_no_empty_one() -> None:
    # find's stderr ends with a newline; the flush of the unfinished line at its end once
    # added an error with no path and no text (seen on a fresh CI machine).
    # stdout ends first, so the errors are read after the last record (the drain).
    errors_text = "find: '/x': Permission denied\\nfind: '/y': No such file\\n"
    script = f'exec >&-; sleep 0.3; printf "{errors_text}" >&2'
    listing = _fake_find(script)
    errors = []
    while not listing.done:
        await listing.page(fs_listing.MAX_PAGE_BYTES)
        errors += listing.take_errors()
    listing.close()
    assert errors == [
        {"path": "/x", "error": "Permission denied"},
        {"path": "/y", "error": "No such file"},
    ]


def _writer_of_records(count: int, done: Path) -> fs_listing.FindListing:
    """A listing over a program in find's place that writes ``count`` records, then
    creates ``done`` (only once every byte is in the pipe, i.e. read from it)."""
    script = (
        "import sys, pathlib\n"
        f"for n in range({count}):\n"
        "    sys.stdout.buffer.write(b'f 1 644 0 0 %d 1.5 1.5 1.5 - /p%08d\\0\\0' % (n, n))\n"
        "sys.stdout.flush()\n"
        f"pathlib.Path({str(done)!r}).touch()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    return fs_listing.FindListing("cursor", proc, time.monotonic() + 60, b"", asyncio.to_thread)


async def test_the_next_page_is_read_while_the_last_one_travels(tmp_path: Path) -> None:
    # Two pages of records, each four times the pipe's 64 KiB: once the first page is
    # taken, the writer can only finish if the listing reads the second one ahead
    # (before, find waited on its full pipe until the host asked again).
    record = len(b"f 1 644 0 0 0 1.5 1.5 1.5 - /p00000000\0\0")
    page_bytes = 4 * 64 * 1024
    count = 2 * page_bytes // record
    done = tmp_path / "written"
    listing = _writer_of_records(count, done)
    try:
        first = await listing.page(page_bytes)
        for _ in range(600):  # a wait for the writer, not a measure of time
            if done.exists():
                break
            await asyncio.sleep(0.05)
        assert done.exists(), "the listing did not read the next page ahead"
        # A smaller page asked for next still gets whole records within its size.
        second = await listing.page(1000)
        assert 0 < len(second) <= 1000 and second.count(b"\0") % 2 == 0
        rest = b""
        while not listing.done:
            rest += await listing.page(page_bytes)
        records = (first + second + rest).split(b"\0")[:-1:2]
        assert records == [b"f 1 644 0 0 %d 1.5 1.5 1.5 - /p%08d" % (n, n) for n in range(count)]
    finally:
        listing.close()
