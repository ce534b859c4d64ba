"""The disk side of a binary pull: chunks written and hashed in order by a thread of
their own, each acknowledged once written, while the loop goes on taking messages."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import IO

import pytest

from pytest_adare.agent.pull_writer import PullWriter

pytestmark = pytest.mark.asyncio


def _no_failure(exc: Exception) -> None:
    pytest.fail(f"a write failed: {exc!r}")


async def test_chunks_are_written_hashed_and_acknowledged_in_order(tmp_path: Path) -> None:
    chunks = [bytes([n]) * (1000 + n) for n in range(20)]
    stored: list[int] = []
    with (tmp_path / "out").open("wb") as out:
        writer = PullWriter(out, stored=stored.append, failed=_no_failure)
        try:
            end = 0
            for chunk in chunks:
                end += len(chunk)
                writer.put(chunk, end)
            await writer.finish()
        finally:
            writer.close()
    data = b"".join(chunks)
    assert (tmp_path / "out").read_bytes() == data
    assert writer.digest.digest() == hashlib.sha256(data).digest()
    ends = [sum(map(len, chunks[: n + 1])) for n in range(len(chunks))]
    assert stored == ends


class _BlockingFile:
    """A file whose writes wait until released (a slow host disk)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.written = b""

    def write(self, data: bytes) -> int:
        assert self.release.wait(30)
        self.written += data
        return len(data)


async def test_the_loop_goes_on_while_a_chunk_is_being_written() -> None:
    disk = _BlockingFile()
    stored: list[int] = []
    writer = PullWriter(disk, stored=stored.append, failed=_no_failure)  # type: ignore[arg-type]
    try:
        writer.put(b"a" * 10, 10)
        writer.put(b"b" * 10, 20)  # queued behind the first: put never waits for the disk
        await asyncio.sleep(0)  # the loop runs; nothing is acknowledged before it is written
        assert stored == []
        disk.release.set()
        await writer.finish()
    finally:
        writer.close()
    assert disk.written == b"a" * 10 + b"b" * 10
    assert stored == [10, 20]


async def test_a_failed_write_is_reported_and_nothing_after_it_is_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "ro").write_bytes(b"")
    failures: list[Exception] = []
    stored: list[int] = []
    out: IO[bytes]
    with (tmp_path / "ro").open("rb") as out:  # writing to it fails
        writer = PullWriter(out, stored=stored.append, failed=failures.append)
        try:
            writer.put(b"x", 1)
            writer.put(b"y", 2)
            with pytest.raises(OSError):
                await writer.finish()
        finally:
            writer.close()
    assert len(failures) == 1 and isinstance(failures[0], OSError)
    assert stored == []


async def test_no_chunk_is_acknowledged_after_close() -> None:
    # close() comes from the loop, so what the thread wrote before it was called is
    # acknowledged by callbacks that can only run after it: they must stay silent.
    disk = _BlockingFile()
    stored: list[int] = []
    writer = PullWriter(disk, stored=stored.append, failed=_no_failure)  # type: ignore[arg-type]
    writer.put(b"a", 1)
    writer.put(b"b", 2)
    disk.release.set()
    writer.close()
    await asyncio.sleep(0.01)
    assert stored == []
    assert disk.written in (b"", b"a", b"ab")
