"""The Guest facade over AgentClient against the real agent server on localhost."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer
from pytest_adare.agent.transfer import BINARY_CHUNK
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentUnreachable, GuestCommandFailed, ToolError
from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry_table import EntryTable
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.loop_thread import shared_loop

TOKEN = "local-test-token"


@pytest.fixture
def agent_config(tmp_path: Path) -> AgentConfig:
    """The conftest's localhost agent, but with a token like every VM's agent."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return AgentConfig(host="127.0.0.1", port=0, run_dir=run_dir, token=TOKEN)


@pytest_asyncio.fixture
async def aguest(agent: AdareVMServer) -> AsyncIterator[AsyncGuest]:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], TOKEN)
    yield AsyncGuest(client)
    await client.close()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.asyncio
async def test_shell_returns_rc_stdout_stderr_and_check_raises(aguest: AsyncGuest) -> None:
    result = await aguest.shell("echo hi; echo oops >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "hi\n", "oops\n")
    with pytest.raises(GuestCommandFailed, match="exited with 3") as caught:
        result.check()
    assert caught.value.result is result
    assert (await aguest.shell("true")).check().ok


@pytest.mark.asyncio
async def test_push_then_pull_10_mib_keeps_the_bytes(aguest: AsyncGuest, tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(10 * 2**20 + 123))
    guest_path = str(tmp_path / "guest" / "copy.bin")
    pushed: list[tuple[int, int]] = []
    await aguest.push(source, guest_path, progress=lambda done, total: pushed.append((done, total)))
    assert sha256_of(Path(guest_path)) == sha256_of(source)
    assert pushed[-1] == (source.stat().st_size, source.stat().st_size)

    pulled: list[tuple[int, int]] = []
    back = await aguest.pull(
        guest_path, tmp_path / "host" / "back.bin", progress=lambda d, t: pulled.append((d, t))
    )
    assert sha256_of(back) == sha256_of(source)
    chunks = -(-source.stat().st_size // BINARY_CHUNK)
    assert len(pulled) == chunks > 1 and pulled[-1][0] == source.stat().st_size
    assert sorted(p.name for p in back.parent.iterdir()) == ["back.bin"]  # no part files left


@pytest.mark.asyncio
async def test_empty_file_round_trip(aguest: AsyncGuest, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    await aguest.push(empty, str(tmp_path / "g-empty"))
    back = await aguest.pull(str(tmp_path / "g-empty"), tmp_path / "h-empty")
    assert back.read_bytes() == b""


@pytest.mark.asyncio
async def test_failed_pull_leaves_no_host_file(aguest: AsyncGuest, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="is a directory"):
        await aguest.pull(str(tmp_path), tmp_path / "dir-copy")
    with pytest.raises(ToolError, match="pull_file"):
        await aguest.pull(str(tmp_path / "missing"), tmp_path / "missing-copy")
    assert not (tmp_path / "dir-copy").exists() and not (tmp_path / "missing-copy").exists()


@pytest.mark.asyncio
async def test_shell_events_reach_subscribers(aguest: AsyncGuest) -> None:
    with aguest.events.record() as seen:
        await aguest.shell("echo evented")
        for _ in range(100):
            if any(e.event_type == "command_complete" for e in seen):
                break
            await asyncio.sleep(0.01)
    kinds = [e.event_type for e in seen]
    assert "command_start" in kinds and "command_complete" in kinds


@pytest.mark.asyncio
async def test_watch_fs_reports_created_and_deleted(aguest: AsyncGuest, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "old.txt").write_text("old")
    async with aguest.watch_fs(str(root)) as watch:
        await aguest.shell(f"rm {root}/old.txt; echo new > {root}/new.txt")
    assert watch.diff is not None
    assert watch.diff.created == {f"{root}/new.txt"}
    assert watch.diff.deleted == {f"{root}/old.txt"}


@pytest.mark.asyncio
async def test_two_snapshots_of_a_tree_hold_each_path_once(
    aguest: AsyncGuest, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    for n in range(20):
        (root / f"file-{n}").write_text("x")
    async with aguest.watch_fs(str(root)) as watch:
        (root / "file-3").write_text("changed")
    assert watch.diff is not None and set(watch.diff.modified) == {f"{root}/file-3"}
    assert watch.after is not None
    before, after = watch.before.entries, watch.after.entries
    assert isinstance(before, EntryTable) and isinstance(after, EntryTable)
    assert all(after.shared_path(p) is before.shared_path(p) for p in watch.before)


@pytest.mark.asyncio
async def test_an_exported_diff_says_when_the_guest_took_each_snapshot(
    aguest: AsyncGuest, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    started = (await aguest.now()).timestamp()
    async with aguest.watch_fs(str(root)) as watch:
        (root / "new.txt").write_text("new")
    ended = (await aguest.now()).timestamp()
    assert watch.diff is not None
    document = json.loads(watch.diff.export(tmp_path / "diff.json").read_text())
    before, after = (document["metadata"][k]["taken_at_guest"] for k in ("before", "after"))
    assert started <= before <= after <= ended  # epoch seconds on the guest's clock
    assert FsDiff.from_json(tmp_path / "diff.json").metadata["after"]["taken_at_guest"] == after


@pytest.mark.asyncio
async def test_unknown_tool_is_a_tool_error(aguest: AsyncGuest) -> None:
    with pytest.raises(ToolError, match="no_such_tool"):
        await aguest.call("no_such_tool")


@pytest.mark.asyncio
async def test_wrong_token_is_refused(agent: AdareVMServer) -> None:
    assert agent.listen_address is not None
    with pytest.raises(AgentUnreachable, match="401"):
        await AgentClient.connect("127.0.0.1", agent.listen_address[1], "wrong")


def test_sync_guest_runs_on_the_shared_loop(shared_loop_agent: AdareVMServer) -> None:
    assert shared_loop_agent.listen_address is not None
    port = shared_loop_agent.listen_address[1]
    client = shared_loop().run(AgentClient.connect("127.0.0.1", port, TOKEN), timeout=30)
    guest = Guest(AsyncGuest(client))
    try:
        assert guest.shell("printf sync").stdout == "sync"
        assert guest.server_info["bundle_hash"]
        assert guest.call("get_timestamp")["timestamp"] > 0
    finally:
        shared_loop().run(client.close(), timeout=30)


@pytest.mark.asyncio
async def test_async_twin_awaited_from_another_loop(shared_loop_agent: AdareVMServer) -> None:
    """Like ``async_guest`` in a pytest-asyncio test: the VM's connection is on the loop thread."""
    assert shared_loop_agent.listen_address is not None
    port = shared_loop_agent.listen_address[1]

    async def connect() -> AsyncGuest:
        return AsyncGuest(await AgentClient.connect("127.0.0.1", port, TOKEN))

    aio = shared_loop().run(connect(), timeout=30)
    try:
        result = await aio.shell("echo from-test-loop")
        assert result.stdout == "from-test-loop\n"
        assert (await aio.call("get_timestamp"))["timestamp"] > 0
    finally:
        await aio.on_home_loop(aio.connection.close())


SHELL_BINARY = bytes(range(256)) * 4  # every byte value, not UTF-8


@pytest.mark.asyncio
async def test_shell_binary_output_arrives_byte_for_byte(aguest: AsyncGuest) -> None:
    octal = "".join(f"\\{byte:03o}" for byte in SHELL_BINARY)
    result = await aguest.shell(f"printf '{octal}'; printf 'caf\\303\\251' >&2")
    assert result.stdout_raw == SHELL_BINARY and not result.truncated
    assert result.stdout == SHELL_BINARY.decode("utf-8", "replace")
    assert (result.stderr, result.stderr_raw) == ("café", "café".encode())
    assert (result.stdout_total, result.stderr_total) == (len(SHELL_BINARY), 5)


@pytest.mark.asyncio
async def test_shell_max_output_bytes_cuts_each_stream_and_counts_the_rest(
    aguest: AsyncGuest,
) -> None:
    result = await aguest.shell(
        "head -c 100000 /dev/zero | tr '\\0' x; head -c 300 /dev/zero >&2", max_output_bytes=1000
    )
    assert result.ok and result.truncated
    assert (result.stdout, result.stdout_truncated, result.stdout_total) == (
        "x" * 1000,
        True,
        100000,
    )
    assert (result.stderr_raw, result.stderr_truncated, result.stderr_total) == (
        b"\0" * 300,
        False,
        300,
    )
