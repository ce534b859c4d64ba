"""File tools over a real WebSocket: pull, push, snapshot, timestamp."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.asyncio
MIB = 1024 * 1024


async def _pull_all(client: Any, path: Path, chunk_size: int | None = None) -> tuple[bytes, list]:
    """Pull every chunk of ``path``; (content, results)."""
    params: dict[str, Any] = {"guest_path": str(path)}
    if chunk_size is not None:
        params["chunk_size"] = chunk_size
    results = []
    data = bytearray()
    index = 0
    while True:
        result = await client.ok("pull_file_chunk", chunk_index=index, **params)
        assert result["status"] == "success", result
        results.append(result)
        data += base64.b64decode(result["chunk_data"])
        if result["eof"]:
            return bytes(data), results
        index += 1
        assert index < result["total_chunks"]


def _write_random(path: Path, size: int) -> str:
    """Fill ``path`` with ``size`` random bytes; their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        for _ in range(size // MIB):
            block = os.urandom(MIB)
            digest.update(block)
            handle.write(block)
    return digest.hexdigest()


def _sha256_of(name: str) -> str:
    with open(os.fsencode(name), "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _mount_tmpfs(path: Path) -> str | None:
    """Mount a tmpfs on ``path``; None on success, else why not."""
    problem = _mount_tmpfs(mount)
    if problem is not None:
        pytest.skip(f"cannot mount tmpfs here: {problem}")
    try:
        (mount / "inside").write_text("x")
        same = await client.ok("get_filesystem_snapshot", root_path=str(tmp_path))
        cross = await client.ok(
            "get_filesystem_snapshot", root_path=str(tmp_path), one_filesystem=False
        )
    finally:
        _umount(mount)
    assert str(mount) in same["snapshot"] and f"{mount}/inside" not in same["snapshot"]
    assert f"{mount}/inside" in cross["snapshot"]


async def test_snapshot_of_a_missing_root_is_a_tool_error(client: Any) -> None:
    result = await client.ok("get_filesystem_snapshot", root_path="/nonexistent/adare")
    assert result["status"] == "error" and "No such file or directory" in result["message"]


async def test_get_timestamp(client: Any) -> None:
    before = time.time()
    result = await client.ok("get_timestamp")
    after = time.time()
    assert before <= result["timestamp"] <= after
    assert result["timezone"] == "UTC"
    parsed = dt.datetime.fromisoformat(result["iso_format"])
    assert parsed.timestamp() == pytest.approx(result["timestamp"], abs=1e-3)
    local = await client.ok("get_timestamp", use_local=True)
    assert dt.datetime.fromisoformat(local["local_time"]).timestamp() == pytest.approx(
        local["timestamp"], abs=1e-3
    )
