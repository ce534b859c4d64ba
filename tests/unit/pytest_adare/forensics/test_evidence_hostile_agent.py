"""pull_changed against a hostile agent: a real WebSocket server on localhost that lies.

The host side is the real stack (AgentClient → AsyncGuest.pull → pull_changed);
only the peer is fake, and it is as malicious as malware in a guest could make it:
paths that climb out with ``..``, Windows paths, NUL, overlong names, wrong
hashes, endless data, chunk indexes far out in the file, symlink entries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from websockets.asyncio.server import ServerConnection, serve

from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.forensics.evidence import MANIFEST_NAME, pull_changed
from pytest_adare.forensics.snapshot import Entry, FsSnapshot
from pytest_adare.guest import AsyncGuest

Answer = Callable[[int, int], dict[str, Any]]


def honest(data: bytes) -> Answer:
    """Answers ``pull_file_chunk`` truthfully for ``data``."""

    def answer(index: int, chunk_size: int) -> dict[str, Any]:
        total = max(1, math.ceil(len(data) / chunk_size))
        chunk = data[index * chunk_size : (index + 1) * chunk_size]
        result = {
            "status": "success",
            "chunk_index": index,
            "total_chunks": total,
            "chunk_data": base64.b64encode(chunk).decode(),
            "file_size": len(data),
            "is_directory": False,
            "eof": index == total - 1,
        }
        if index == total - 1:
            result["sha256"] = hashlib.sha256(data).hexdigest()
        return result

    return answer


def lying_hash(data: bytes) -> Answer:
    def answer(index: int, chunk_size: int) -> dict[str, Any]:
        return {**honest(data)(index, chunk_size), "sha256": "0" * 64}

    return answer


def endless(chunk: bytes) -> Answer:
    """Claims a tiny file, then sends chunk after chunk."""

    def answer(index: int, _chunk_size: int) -> dict[str, Any]:
        return {
            "status": "success",
            "chunk_index": index,
            "total_chunks": 50,
            "chunk_data": base64.b64encode(chunk).decode(),
            "file_size": 5,
            "is_directory": False,
            "eof": False,
        }

    return answer


def far_index(data: bytes) -> Answer:
    """Chunk 1 claims to be chunk 200: a host that seeks there makes a sparse 200 MB file."""

    def answer(index: int, chunk_size: int) -> dict[str, Any]:
        reply = {**honest(data)(0, chunk_size), "total_chunks": 2, "eof": index == 1}
        if index == 1:
            reply["chunk_index"] = 200
        return reply

    return answer


LONG = "/x/" + "é" * 200  # 400 bytes in one component
FILES: dict[str, Answer] = {
    "/home/user/report.txt": honest(b"evidence " * 300_000),  # 2.7 MB: several chunks
    "/home/user/../../../../etc/climbed": honest(b"climbed"),
    "../../outside.txt": honest(b"outside"),
    "C:\\Users\\..\\..\\..\\windows.txt": honest(b"windows"),
    "/home/user/caf\udce9": honest(b"latin-1 name"),
    LONG: honest(b"long"),
    "/home/user/lying-hash": lying_hash(b"tampered"),
    "/home/user/endless": endless(b"A" * 4096),
    "/home/user/far-index": far_index(b"far"),
    "/home/user/lying-size": honest(b"much more than the snapshot said"),
}


async def hostile_agent(websocket: ServerConnection) -> None:
    async for frame in websocket:
        message = json.loads(frame)
        if message["type"] == "connect":
            reply = {
                "type": "connect",
                "id": message["id"],
                "timestamp": None,
                "client_info": {"version": "6.6.6", "platform": "Linux"},
            }
        elif message["type"] == "tool_call":
            params = message["params"]
            answer = FILES.get(params["guest_path"])
            result = (
                answer(params["chunk_index"], params["chunk_size"])
                if answer
                else {"status": "error", "message": "No such file"}
            )
            reply = {
                "type": "tool_result",
                "id": message["id"],
                "timestamp": None,
                "success": True,
                "result": result,
                "error": None,
            }
        else:
            continue
        await websocket.send(json.dumps(reply))


@pytest_asyncio.fixture
async def hostile_guest() -> AsyncIterator[AsyncGuest]:
    async with serve(hostile_agent, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        client = await AgentClient.connect("127.0.0.1", port, None, attempts=1)
        try:
            yield AsyncGuest(client)
        finally:
            await client.close()


def entry(kind: str = "file", size: int = 5, sha256: str | None = None) -> Entry:
    return Entry(kind, size, 0o100644, 0, 0, 1, 1.0, 1.0, 1.0, None, sha256, None)


def created(*paths: str, **special: Entry) -> Any:
    before = FsSnapshot("/", {})
    after = FsSnapshot("/", {p: special.get(p, entry()) for p in paths})
    return after.diff(before)


def manifest(dest: Path) -> dict[str, dict[str, Any]]:
    document = json.loads((dest / MANIFEST_NAME).read_text())
    return {row["guest_path"]: row for row in document["files"]}


def all_inside(paths: list[Path], top: Path) -> bool:
    return all(path.resolve().is_relative_to(top.resolve()) for path in paths)


def all_files(top: Path) -> set[Path]:
    return {Path(d, f) for d, _, files in os.walk(top) for f in files}


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    (tmp_path / "sentinel").mkdir()
    return tmp_path / "sentinel" / "evidence"


@pytest.mark.asyncio
async def test_hostile_paths_all_land_inside_dest(hostile_guest: AsyncGuest, dest: Path) -> None:
    outside_before = all_files(dest.parent.parent)
    diff = created(*(path for path in FILES if path != "/home/user/far-index"))
    pulled = await pull_changed(hostile_guest, diff, dest, max_bytes=16 * 1024 * 1024)
    assert all_inside(pulled, dest)
    assert all_files(dest.parent.parent) - all_files(dest) == outside_before
    rows = manifest(dest)
    placed = {g: rows[g]["host_path"] for g in rows if rows[g]["status"] == "pulled"}
    assert placed["/home/user/../../../../etc/climbed"] == "etc/climbed"
    assert placed["../../outside.txt"] == "outside.txt"
    assert placed["C:\\Users\\..\\..\\..\\windows.txt"] == "windows.txt"
    assert (dest / "etc/climbed").read_bytes() == b"climbed"
    assert os.fsencode(dest / "home/user") + b"/caf\xe9" in map(os.fsencode, pulled)
    long_name = Path(placed[LONG]).name
    assert len(os.fsencode(long_name)) <= 255 and (dest / placed[LONG]).read_bytes() == b"long"


@pytest.mark.asyncio
async def test_manifest_holds_host_computed_hashes_not_the_guests_claims(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    data = b"evidence " * 300_000
    claimed = entry(size=5, sha256="f" * 64)
    diff = created(
        "/home/user/report.txt", "/home/user/lying-size", **{"/home/user/report.txt": claimed}
    )
    await pull_changed(hostile_guest, diff, dest)
    rows = manifest(dest)
    report = rows["/home/user/report.txt"]
    assert report["sha256"] == hashlib.sha256(data).hexdigest()
    assert (report["size"], report["guest_size"], report["guest_sha256"]) == (
        len(data),
        5,
        "f" * 64,
    )
    assert (dest / "home/user/report.txt").read_bytes() == data
    lying = rows["/home/user/lying-size"]
    assert lying["size"] == len(b"much more than the snapshot said") != lying["guest_size"]


@pytest.mark.asyncio
async def test_lies_about_hash_length_and_offsets_leave_no_file(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    liars = ("/home/user/lying-hash", "/home/user/endless", "/home/user/far-index")
    pulled = await pull_changed(hostile_guest, created(*liars), dest, max_bytes=10_000)
    rows = manifest(dest)
    assert pulled == []
    assert {rows[p]["status"] for p in liars} == {"failed"}
    assert "sha256 mismatch" in rows["/home/user/lying-hash"]["reason"]
    assert "guest reports 50 chunks for 5 bytes" in rows["/home/user/endless"]["reason"]
    assert "guest reports 2 chunks for 3 bytes" in rows["/home/user/far-index"]["reason"]
    assert all_files(dest) == {dest / MANIFEST_NAME}


@pytest.fixture
def elsewhere(dest: Path) -> Path:
    """A directory outside dest that dest/home points to."""
    outside = dest.parent / "elsewhere"
    outside.mkdir()
    dest.mkdir()
    (dest / "home").symlink_to(outside)
    return outside


@pytest.mark.asyncio
async def test_symlink_in_dest_is_never_written_through(
    hostile_guest: AsyncGuest, dest: Path, elsewhere: Path
) -> None:
    pulled = await pull_changed(hostile_guest, created("/home/user/report.txt"), dest)
    assert pulled == [] and all_files(elsewhere) == set()
    assert "is a symlink" in manifest(dest)["/home/user/report.txt"]["reason"]


@pytest.mark.asyncio
async def test_nul_paths_symlink_entries_and_directories_are_skipped(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    diff = created(
        "/tmp/a\0b",
        "/home/user/link",
        "/home/user/dir",
        **{"/home/user/link": entry("symlink"), "/home/user/dir": entry("dir")},
    )
    assert await pull_changed(hostile_guest, diff, dest) == []
    rows = manifest(dest)
    assert "NUL" in rows["/tmp/a\0b"]["reason"]
    assert rows["/home/user/link"]["status"] == "skipped"
    assert rows["/home/user/dir"]["reason"] == "not a regular file (dir)"


@pytest.mark.asyncio
async def test_paths_that_normalise_to_one_host_path_do_not_overwrite(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    FILES["/home/user/./report.txt"] = honest(b"second")
    try:
        diff = created("/home/user/report.txt", "/home/user/./report.txt")
        pulled = await pull_changed(hostile_guest, diff, dest)
    finally:
        del FILES["/home/user/./report.txt"]
    assert {p.name for p in pulled} == {"report.txt", "report.txt~2"}
    rows = manifest(dest)
    assert (dest / rows["/home/user/./report.txt"]["host_path"]).read_bytes() == b"second"


@pytest.mark.asyncio
async def test_the_guest_facade_passes_the_size_cap_on(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    report = "/home/user/report.txt"  # 2.7 MB, honest
    pulled = await hostile_guest.pull_changed(created(report), dest, max_bytes=1_000_000)
    row = manifest(dest)[report]
    assert pulled == [] and row["status"] == "failed"
    assert "1000000" in row["reason"]


@pytest.mark.asyncio
async def test_guest_files_named_like_the_manifest_or_its_temp_file_are_kept(
    hostile_guest: AsyncGuest, dest: Path
) -> None:
    planted = {
        "/.adare-evidence.json.part": b"looks like the manifest's temp file",
        "/adare-evidence.json/inside": b"makes the manifest's name a directory",
    }
    FILES.update({path: honest(data) for path, data in planted.items()})
    try:
        pulled = await pull_changed(hostile_guest, created(*planted), dest)
    finally:
        for path in planted:
            del FILES[path]
    rows = manifest(dest)
    assert len(pulled) == 2 and {rows[p]["status"] for p in planted} == {"pulled"}
    for path, data in planted.items():
        assert (dest / rows[path]["host_path"]).read_bytes() == data, path
    assert rows["/.adare-evidence.json.part"]["host_path"] == ".adare-evidence.json.part"
    assert rows["/adare-evidence.json/inside"]["host_path"] == "adare-evidence.json~guest/inside"
    assert json.loads((dest / MANIFEST_NAME).read_text())["format"] == "adare-evidence"
    assert all_files(dest) == {*pulled, dest / MANIFEST_NAME}
