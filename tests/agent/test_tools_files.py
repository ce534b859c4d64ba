"""``tools/files.py`` (``FileTools``) over a real WebSocket: pull, push, snapshot; and
against a hostile guest (issue 12, defect 1; issue 15's result fixes).

Malware can swap a file for a FIFO between the agent's check and its ``open``: an
``open`` of a FIFO without a writer blocks for ever. The swap is made to happen
exactly at the agent's open here, so the race is hit every time, not 6 in 9,000.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from adare_guest import regular_files

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


def _touch(path: Path) -> Path:
    path.touch()
    return path


def _sha256_of(name: str) -> str:
    with open(os.fsencode(name), "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _mount_tmpfs(path: Path) -> str | None:
    """Mount a tmpfs on ``path``; None on success, else why not."""
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "tmpfs", str(path)], capture_output=True, check=False
    )
    return None if done.returncode == 0 else done.stderr.decode().strip()


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True, timeout=30)


@pytest.mark.parametrize(
    ("size", "chunk_size", "chunks"),
    [(0, None, 1), (1, None, 1), (2048, 1024, 2), (2049, 1024, 3), (1023, 1024, 1)],
)
async def test_pull_empty_small_and_chunk_boundary_files(
    client: Any, tmp_path: Path, size: int, chunk_size: int | None, chunks: int
) -> None:
    path = tmp_path / "f.bin"
    content = os.urandom(size)
    path.write_bytes(content)
    data, results = await _pull_all(client, path, chunk_size)
    assert data == content
    assert [r["total_chunks"] for r in results] == [chunks] * chunks
    assert [r["eof"] for r in results] == [False] * (chunks - 1) + [True]
    assert results[-1]["sha256"] == hashlib.sha256(content).hexdigest()
    assert all("sha256" not in r for r in results[:-1])
    meta = results[0]["file_metadata"]
    st = path.stat()
    assert (meta["size"], meta["inode"], meta["mode"]) == (size, st.st_ino, st.st_mode)
    assert all("file_metadata" not in r for r in results[1:])
    assert all(r["file_size"] == size and r["is_directory"] is False for r in results)


async def test_pull_100_mib_file_hash_matches(client: Any, tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    expected = _write_random(path, 100 * MIB)
    data, results = await _pull_all(client, path)
    assert len(results) == 100 and len(data) == 100 * MIB
    assert results[-1]["sha256"] == expected == hashlib.sha256(data).hexdigest()


async def test_pull_out_of_order_still_gives_the_whole_file_hash(
    client: Any, tmp_path: Path
) -> None:
    path = tmp_path / "f.bin"
    content = os.urandom(5000)
    path.write_bytes(content)
    last = await client.ok("pull_file_chunk", guest_path=str(path), chunk_index=4, chunk_size=1024)
    assert last["eof"] and last["sha256"] == hashlib.sha256(content).hexdigest()


async def test_pull_with_chunks_in_flight_at_once_gives_the_whole_file_hash(
    client: Any, tmp_path: Path
) -> None:
    path = tmp_path / "f.bin"
    content = os.urandom(10 * 1024 + 17)
    path.write_bytes(content)
    calls = [
        client.ok("pull_file_chunk", guest_path=str(path), chunk_index=i, chunk_size=1024)
        for i in (0, 10, 9, 2, 1, 3, 5, 4, 8, 6, 7)
    ]
    results = await asyncio.gather(*calls)
    by_index = {r["chunk_index"]: r for r in results}
    data = b"".join(base64.b64decode(by_index[i]["chunk_data"]) for i in range(11))
    assert data == content
    assert by_index[10]["eof"] and by_index[10]["sha256"] == hashlib.sha256(content).hexdigest()


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"chunk_index": 0}, "is a directory"),
        ({"guest_path": "/nonexistent/adare", "chunk_index": 0}, "No such file or directory"),
        ({"chunk_index": 3, "file": True}, "out of range"),
        ({"chunk_index": 0, "chunk_size": 0, "file": True}, "chunk_size must be"),
    ],
)
async def test_pull_errors_are_tool_errors(
    client: Any, tmp_path: Path, params: dict[str, Any], fragment: str
) -> None:
    target = tmp_path
    if params.pop("file", False):
        target = tmp_path / "x"
        target.write_bytes(b"abc")
    params.setdefault("guest_path", str(target))
    result = await client.ok("pull_file_chunk", **params)
    assert result["status"] == "error" and fragment in result["message"]
    assert result["is_directory"] is (fragment == "is a directory")


def _chunks(data: bytes, size: int) -> list[str]:
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return [base64.b64encode(p).decode() for p in pieces]


async def test_push_writes_atomically_with_mode_and_hash(client: Any, tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "dir" / "out.bin"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"old content")
    content = os.urandom(3000)
    chunks = _chunks(content, 1024)
    for index, chunk in enumerate(chunks[:-1]):
        step = await client.ok(
            "push_file_chunk",
            guest_path=str(dest),
            chunk_index=index,
            chunk_data=chunk,
            total_chunks=len(chunks),
        )
        assert step["status"] == "success" and step["complete"] is False
        assert dest.read_bytes() == b"old content"  # nothing visible until the last chunk
        assert len([p for p in dest.parent.iterdir() if "adare-part" in p.name]) == 1
    last = await client.ok(
        "push_file_chunk",
        guest_path=str(dest),
        chunk_index=len(chunks) - 1,
        chunk_data=chunks[-1],
        total_chunks=len(chunks),
        sha256=hashlib.sha256(content).hexdigest(),
        mode=0o640,
    )
    assert last["status"] == "success" and last["complete"] is True
    assert last["sha256"] == hashlib.sha256(content).hexdigest()
    assert dest.read_bytes() == content
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert sorted(p.name for p in dest.parent.iterdir()) == ["out.bin"]


async def test_push_creates_parents_and_empty_files(client: Any, tmp_path: Path) -> None:
    dest = tmp_path / "new" / "empty"
    result = await client.ok(
        "push_file_chunk",
        guest_path=str(dest),
        chunk_index=0,
        chunk_data="",
        total_chunks=1,
        sha256=hashlib.sha256(b"").hexdigest(),
    )
    assert result["complete"] and dest.read_bytes() == b""


async def test_push_with_a_wrong_hash_leaves_the_old_file(client: Any, tmp_path: Path) -> None:
    dest = tmp_path / "dest" / "keep"
    dest.parent.mkdir()
    dest.write_bytes(b"original")
    result = await client.ok(
        "push_file_chunk",
        guest_path=str(dest),
        chunk_index=0,
        chunk_data=base64.b64encode(b"new").decode(),
        total_chunks=1,
        sha256="0" * 64,
    )
    assert result["status"] == "error" and "sha256 mismatch" in result["message"]
    assert dest.read_bytes() == b"original"
    assert os.listdir(dest.parent) == ["keep"]


@pytest.mark.parametrize(
    ("path", "params", "fragment"),
    [
        ("relative/file", {}, "must be absolute"),
        ("{tmp}/../escape", {}, "must not contain '..'"),
        ("{tmp}/f", {"chunk_data": "***"}, "not valid base64"),
        ("{tmp}/f", {"chunk_index": 1}, "out of order: expected chunk 0"),
        ("{tmp}/f", {"chunk_index": 2, "total_chunks": 2}, "need 0 <= chunk_index < total_chunks"),
        ("{tmp}/f", {"mode": 0o77777}, "mode must be"),
        ("{tmp}", {}, "is a directory"),
    ],
)
async def test_push_refuses_bad_requests(
    client: Any, tmp_path: Path, path: str, params: dict[str, Any], fragment: str
) -> None:
    call = {
        "guest_path": path.format(tmp=tmp_path),
        "chunk_index": 0,
        "chunk_data": "",
        "total_chunks": 3,
    }
    call.update(params)
    result = await client.ok("push_file_chunk", **call)
    assert result["status"] == "error" and fragment in result["message"]


# --------------------------------------------------------------------------- snapshot


def _make_tricky_tree(root: Path) -> dict[bytes, str]:
    """A tree with hard names; returns {path bytes: type}."""
    broot = os.fsencode(root)
    made: dict[bytes, str] = {broot: "dir"}

    def add(rel: bytes, kind: str, content: bytes = b"x") -> None:
        path = broot + b"/" + rel
        if kind == "dir":
            os.mkdir(path)
        elif kind == "file":
            with open(path, "wb") as handle:
                handle.write(content)
        made[path] = kind

    add(b"new\nline.txt", "file", b"line1\nline2\n")
    add(b"pi|pe", "file")
    add(b"caf\xe9-latin1", "file", b"latin")
    add(b"\xff\xfe dir", "dir")
    add(b"\xff\xfe dir/inner", "file", b"")
    add(b"empty", "dir")
    add(b"a", "dir")
    add(b"a/b", "dir")
    add(b"a/b/deep.txt", "file", b"deep")
    os.symlink(b"pi|pe", broot + b"/link")
    made[broot + b"/link"] = "symlink"
    os.symlink(b"/nonexistent/target", broot + b"/dangling")
    made[broot + b"/dangling"] = "symlink"
    os.mkfifo(broot + b"/fifo")
    made[broot + b"/fifo"] = "other"
    return made


async def test_snapshot_is_exact_on_hard_names_links_and_empty_dirs(
    client: Any, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    expected = _make_tricky_tree(root)
    result = await client.ok("get_filesystem_snapshot", root_path=str(root), hash=True)
    assert result["status"] == "success" and result["complete"] is True
    snapshot = result["snapshot"]
    assert {os.fsencode(p): m["type"] for p, m in snapshot.items()} == expected
    assert result["file_count"] == len(expected)
    for name, meta in snapshot.items():
        st = os.lstat(os.fsencode(name))
        assert (meta["size"], meta["mode"], meta["uid"], meta["gid"], meta["inode"]) == (
            st.st_size,
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_ino,
        )
        assert meta["mtime"] == st.st_mtime == meta["timestamps"]["modified"]
        assert meta["timestamps"]["changed"] == st.st_ctime
        if meta["type"] == "file":
            assert meta["sha256"] == _sha256_of(name)
        else:
            assert "sha256" not in meta
    assert snapshot[f"{root}/link"]["target"] == "pi|pe"
    assert snapshot[f"{root}/dangling"]["target"] == "/nonexistent/target"


async def test_snapshot_exclude_and_no_hash_by_default(client: Any, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    _make_tricky_tree(root)
    result = await client.ok(
        "get_filesystem_snapshot", root_path=str(root), exclude=[f"{root}/a", "*.txt"]
    )
    names = {p[len(str(root)) + 1 :] for p in result["snapshot"]}
    assert "a" not in names and "a/b" not in names and "new\nline.txt" not in names
    assert "pi|pe" in names
    assert all("sha256" not in m for m in result["snapshot"].values())


async def test_snapshot_of_root_skips_proc_sys_dev_run(client: Any) -> None:
    kept = {"proc", "sys", "dev", "run"}
    exclude = [f"/{name}" for name in os.listdir("/") if name not in kept]
    result = await client.ok("get_filesystem_snapshot", root_path="/", exclude=exclude)
    assert list(result["snapshot"]) == ["/"]


async def test_snapshot_honours_its_timeout(client: Any) -> None:
    started = time.monotonic()
    result = await client.ok("get_filesystem_snapshot", root_path="/usr", timeout=0.05)
    assert time.monotonic() - started < 5
    assert result["status"] == "error" and result["complete"] is False
    assert "timed out after 0.05 s" in result["message"]


async def test_snapshot_hashing_stops_at_the_deadline(client: Any, tmp_path: Path) -> None:
    os.truncate(_touch(tmp_path / "sparse"), 8 * 1024 * MIB)  # hashing it takes seconds
    started = time.monotonic()
    result = await client.ok(
        "get_filesystem_snapshot", root_path=str(tmp_path), hash=True, timeout=0.3
    )
    assert time.monotonic() - started < 4
    assert result["status"] == "error" and result["complete"] is False


async def test_snapshot_stays_on_one_filesystem_when_asked(client: Any, tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
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


# --------------------------------------------------------------------------- hostile guest

ANSWER_BOUND = 10.0
"""Seconds within which a call touching a swapped-in FIFO must be answered."""


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
    monkeypatch.setattr(regular_files, "os", proxy)
    monkeypatch.setattr(regular_files, "open", builtin_open, raising=False)
    try:
        yield swap
    finally:
        swap.release()


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


async def test_every_error_result_carries_error_as_well_as_message(client: Any) -> None:
    missing = await client.ok("pull_file_chunk", guest_path="/nonexistent/adare")
    assert missing["status"] == "error" and missing["error"] == missing["message"]
    chained = await client.ok(
        "chain_commands", commands=[{"tool": "pull_file_chunk", "params": {"guest_path": "/nx"}}]
    )
    step = chained["results"][0]["result"]
    assert step["status"] == "error" and step["error"] == step["message"]
    assert chained["error"] == chained["message"]
