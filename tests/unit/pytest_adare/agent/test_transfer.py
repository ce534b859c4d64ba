"""The host never trusts the layout of a pulled file: chunk counts, indexes and lengths."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import pytest

from pytest_adare.agent import transfer
from pytest_adare.agent.transfer import chunk_data as _chunk_data
from pytest_adare.agent.transfer import chunk_layout as _chunk_layout
from pytest_adare.errors import ToolError

MIB = 1024 * 1024


def chunk(index: object, data: bytes) -> dict[str, object]:
    return {"chunk_index": index, "chunk_data": base64.b64encode(data).decode()}


@pytest.mark.parametrize(
    ("file_size", "chunk_size", "chunks"),
    [(0, MIB, 1), (1, MIB, 1), (MIB, MIB, 1), (MIB + 1, MIB, 2), (10 * MIB, 2 * MIB, 5)],
)
def test_consistent_layouts_are_accepted(file_size: int, chunk_size: int, chunks: int) -> None:
    first = {"total_chunks": chunks, "file_size": file_size}
    assert _chunk_layout("/f", first, chunk_size) == (chunks, file_size)


@pytest.mark.parametrize(
    "first",
    [
        {"total_chunks": 50, "file_size": 5},
        {"total_chunks": 0, "file_size": 0},
        {"total_chunks": 1, "file_size": -1},
        {"total_chunks": "many", "file_size": 5},
        {"file_size": 5},
    ],
)
def test_inconsistent_layouts_are_refused(first: dict[str, object]) -> None:
    with pytest.raises(ToolError, match="/f"):
        _chunk_layout("/f", first, MIB)


def test_a_chunk_is_accepted_only_as_the_one_asked_for_with_its_length() -> None:
    size = MIB + 3
    assert _chunk_data("/f", chunk(1, b"abc"), 1, MIB, size) == b"abc"
    with pytest.raises(ToolError, match="asked for chunk 1, got 200"):
        _chunk_data("/f", chunk(200, b"abc"), 1, MIB, size)
    with pytest.raises(ToolError, match="has 4 bytes, expected 3"):
        _chunk_data("/f", chunk(1, b"abcd"), 1, MIB, size)
    with pytest.raises(ToolError, match="not base64"):
        _chunk_data("/f", {"chunk_index": 1, "chunk_data": "***"}, 1, MIB, size)



def test_a_pull_never_writes_into_or_removes_an_existing_part_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"guest bytes"
    answer = {
        "chunk_index": 0,
        "total_chunks": 1,
        "file_size": len(data),
        "chunk_data": base64.b64encode(data).decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
    }

    async def call(tool: str, /, **params: object) -> dict[str, object]:
        return answer

    squatter = tmp_path / ".out.bin.0000000000000000.part"
    squatter.write_bytes(b"not yours")
    with monkeypatch.context() as patch:
        patch.setattr(transfer.secrets, "token_hex", lambda n=None: "0" * 16)
        with pytest.raises(FileExistsError):
            asyncio.run(transfer.pull_file(call, "/g", tmp_path / "out.bin"))
    assert squatter.read_bytes() == b"not yours"
    assert asyncio.run(transfer.pull_file(call, "/g", tmp_path / "out.bin")).read_bytes() == data
