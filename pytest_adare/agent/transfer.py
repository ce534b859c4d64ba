"""Chunked file transfer over the agent's ``pull_file_chunk`` / ``push_file_chunk`` tools.

A pull asks for chunk 0 first (it carries the file size and chunk count), then keeps
:data:`PULL_WINDOW` chunk requests in flight and writes each chunk at its offset as it
arrives, into a hidden ``.part`` file that is renamed over the target only when the
host's sha256 of the whole file equals the guest's. Everything the guest says about
the file is untrusted: sizes, chunk indexes and lengths are checked against each other
before any byte is written, so a lying guest cannot make the host write or hash more
than the size it announced.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from pytest_adare.errors import ToolError

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(bytes_done, bytes_total)`` during a file transfer."""

PULL_CHUNK = 2 * 1024 * 1024
PUSH_CHUNK = 4 * 1024 * 1024  # 5.4 MiB as base64: well under the 16 MiB message limit
PULL_WINDOW = 3  # chunk requests in flight at once (guest memory: several chunk sizes each)
# 2 MiB x 3 measured as fast as 4 MiB x 2 under TCG with half the guest memory; an
# 8 MiB chunk x 2 got the agent killed in a 256 MiB guest.


class CheckedCall(Protocol):
    """A tool call whose ``status: error`` results raise :class:`ToolError`."""

    def __call__(self, tool: str, /, **params: Any) -> Awaitable[dict[str, Any]]: ...


async def pull_file(
    call: CheckedCall,
    guest_path: str,
    host_path: str | os.PathLike[str],
    *,
    progress: ProgressCallback | None = None,
    chunk_size: int = PULL_CHUNK,
) -> Path:
    """Copy a guest file to ``host_path``: chunked, sha256-verified, atomic on the host.

    :raise ToolError: the guest file cannot be read, is a directory, the guest's chunk
        layout does not add up, or the hash differs.
    """
    target = Path(host_path)

    async def chunk(index: int) -> dict[str, Any]:
        return await call(
            "pull_file_chunk", guest_path=guest_path, chunk_index=index, chunk_size=chunk_size
        )

    first = await chunk(0)
    if first.get("is_directory"):
        raise ToolError("pull_file_chunk", f"{guest_path!r} is a directory in the guest", first)
    total_chunks, file_size = chunk_layout(guest_path, first, chunk_size)
    part = target.with_name(f".{target.name}.{secrets.token_hex(8)}.part")
    target.parent.mkdir(parents=True, exist_ok=True)
    # "x": never open a file that exists (a pulled guest file of that name, or a link);
    # opened before the try so a name we did not create is never removed.
    out = part.open("xb")
    try:
        with out:
            done = 0

            def write(answer: dict[str, Any], index: int) -> None:
                nonlocal done
                data = chunk_data(guest_path, answer, index, chunk_size, file_size)
                out.seek(index * chunk_size)
                out.write(data)
                done += len(data)
                if progress is not None:
                    progress(done, file_size)

            write(first, 0)
            last = await _pull_window(chunk, first, total_chunks, write)
        sha256 = last.get("sha256")
        if not isinstance(sha256, str) or not sha256:
            raise ToolError("pull_file_chunk", f"{guest_path!r}: last chunk has no sha256", None)
        actual = await asyncio.to_thread(file_sha256, part)
        if actual != sha256:
            raise ToolError(
                "pull_file_chunk",
                f"{guest_path!r}: sha256 mismatch (guest {sha256}, host {actual})",
                None,
            )
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return target


async def _pull_window(
    chunk: Callable[[int], Awaitable[dict[str, Any]]],
    first: dict[str, Any],
    total_chunks: int,
    write: Callable[[dict[str, Any], int], None],
) -> dict[str, Any]:
    """Fetch chunks 1.. with up to PULL_WINDOW requests in flight; the last chunk's answer.

    Chunks may finish out of order (the agent serves them concurrently), which is why
    each is written at its own offset. The first failure cancels the rest.
    """
    last = first
    indexes = iter(range(1, total_chunks))
    in_flight: dict[asyncio.Future[dict[str, Any]], int] = {}
    try:
        while True:
            while len(in_flight) < PULL_WINDOW and (i := next(indexes, None)) is not None:
                in_flight[asyncio.ensure_future(chunk(i))] = i
            if not in_flight:
                return last
            finished, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                index = in_flight.pop(task)
                answer = task.result()
                write(answer, index)
                if index == total_chunks - 1:
                    last = answer
    finally:
        for task in in_flight:
            task.cancel()


async def push_file(
    call: CheckedCall,
    host_path: str | os.PathLike[str],
    guest_path: str,
    *,
    mode: int | None = None,
    progress: ProgressCallback | None = None,
    chunk_size: int = PUSH_CHUNK,
) -> None:
    """Copy a host file to ``guest_path`` (chunked; the agent verifies sha256, renames).

    :raise FileNotFoundError: ``host_path`` does not exist.
    :raise ToolError: the agent refused a chunk or the hash differed.
    """
    source = Path(host_path)
    size, sha256 = await asyncio.to_thread(_size_and_sha256, source)
    total_chunks = max(1, -(-size // chunk_size))
    done = 0
    src = await asyncio.to_thread(source.open, "rb")
    try:
        for index in range(total_chunks):
            data = await asyncio.to_thread(src.read, chunk_size)
            params: dict[str, Any] = {
                "guest_path": guest_path,
                "chunk_index": index,
                "chunk_data": base64.b64encode(data).decode("ascii"),
                "total_chunks": total_chunks,
            }
            if index == total_chunks - 1:
                params["sha256"] = sha256
                if mode is not None:
                    params["mode"] = mode
            await call("push_file_chunk", **params)
            done += len(data)
            if progress is not None:
                progress(done, size)
    finally:
        src.close()


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of a host file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def _size_and_sha256(path: Path) -> tuple[int, str]:
    return path.stat().st_size, file_sha256(path)


def chunk_layout(guest_path: str, first: dict[str, Any], chunk_size: int) -> tuple[int, int]:
    """(total_chunks, file_size) from chunk 0, checked for consistency: guest data is
    untrusted, and a lying size must not make the host write or hash gigabytes."""
    try:
        total_chunks, file_size = int(first["total_chunks"]), int(first.get("file_size", 0))
    except (KeyError, TypeError, ValueError, OverflowError):  # e.g. 1e400 reads as infinity
        raise ToolError(
            "pull_file_chunk", f"{guest_path!r}: chunk 0 has no valid size", None
        ) from None
    expected = max(1, -(-file_size // chunk_size)) if file_size >= 0 else -1
    if total_chunks != expected:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: guest reports {total_chunks} chunks for {file_size} bytes "
            f"(expected {expected} of {chunk_size} bytes)",
            None,
        )
    return total_chunks, file_size


def chunk_data(
    guest_path: str, chunk: dict[str, Any], index: int, chunk_size: int, file_size: int
) -> bytes:
    """The bytes of chunk ``index``, refused unless it is the chunk asked for, with the
    length the announced file size implies (the file changed, or the guest lies)."""
    if chunk.get("chunk_index") != index:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: asked for chunk {index}, got {chunk.get('chunk_index')!r}",
            None,
        )
    try:
        data = base64.b64decode(chunk.get("chunk_data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError):  # TypeError: not text at all
        raise ToolError(
            "pull_file_chunk", f"{guest_path!r}: chunk {index} is not base64", None
        ) from None
    expected = min(chunk_size, file_size - index * chunk_size)
    if len(data) != expected:
        raise ToolError(
            "pull_file_chunk",
            f"{guest_path!r}: chunk {index} has {len(data)} bytes, expected {expected} "
            "(the file changed during the pull?)",
            None,
        )
    return data
