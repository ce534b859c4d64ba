"""Console capture: log file, ring of lines, regex waiters (fed bytes as QEMU's pipe would)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.machine.console import ConsoleCapture


@pytest.fixture
def capture(tmp_path: Path) -> Iterator[ConsoleCapture]:
    """A capture on ``tmp_path/console.log``, its pipe closed (and log file with it) after."""
    opened = ConsoleCapture(tmp_path / "console.log")
    yield opened
    opened.connection_lost(None)


@pytest.mark.asyncio
async def test_every_byte_reaches_the_log_and_lines_the_ring(tmp_path: Path) -> None:
    capture = ConsoleCapture(tmp_path / "console.log", ring_lines=3)
    for chunk in (b"one\r\ntw", b"o\nthree\nfour\nlogin: "):
        capture.data_received(chunk)
    capture.connection_lost(None)
    assert (tmp_path / "console.log").read_bytes() == b"one\r\ntwo\nthree\nfour\nlogin: "
    assert capture.tail(10) == ["two", "three", "four", "login: "]
    assert capture.tail(2) == ["four", "login: "]


@pytest.mark.asyncio
async def test_utf8_split_across_chunks_is_not_mangled(capture: ConsoleCapture) -> None:
    snowman = "☃".encode()
    capture.data_received(b"x" + snowman[:1])
    capture.data_received(snowman[1:] + b"\n")
    assert capture.tail(1) == ["x☃"]


@pytest.mark.asyncio
async def test_a_waiter_matches_old_lines_unless_given_a_later_mark(
    capture: ConsoleCapture,
) -> None:
    capture.data_received(b"login: \nready\n")
    assert (await capture.wait_for("login")).group(0) == "login"
    mark = capture.mark()
    later = capture.wait_for("login", since=mark)
    await asyncio.sleep(0)
    assert not later.done()
    capture.data_received(b"reboot\nlogin: ")
    assert (await asyncio.wait_for(later, 1)).string == "login: "


@pytest.mark.asyncio
async def test_a_cancelled_waiter_is_forgotten(capture: ConsoleCapture) -> None:
    future = capture.wait_for("never")
    future.cancel()
    await asyncio.sleep(0)
    capture.data_received(b"never\n")
    assert future.cancelled()


@pytest.mark.asyncio
async def test_a_mark_splits_the_line_being_written(capture: ConsoleCapture) -> None:
    capture.data_received(b"noise: probe")
    mark = capture.mark()
    waiter = capture.wait_for(r"probe-\d+", since=mark)
    await asyncio.sleep(0)
    assert not waiter.done(), "output from before the mark matched"
    capture.data_received(b" then probe-42 and more\n")
    assert (await asyncio.wait_for(waiter, 1)).group(0) == "probe-42"
    assert capture.tail(1) == ["noise: probe then probe-42 and more"]
