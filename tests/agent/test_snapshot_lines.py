"""Snapshots in the record format (``format="lines"``) equal the JSON format's on the
same tree, over a real WebSocket to an in-process agent; the host reads pages safely."""

from __future__ import annotations

import doctest
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from adare_guest import fs_listing
from pytest_adare.forensics import entry as entry_module
from pytest_adare.forensics import snapshot as snapshot_module
from pytest_adare.forensics.snapshot import FsSnapshot, SnapshotFormatError, SnapshotPages

REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0


def _odd_tree(root: Path) -> None:
    """Files, dirs, links and names that break naive line formats."""
    base = os.fsencode(root)
    for name in (b"a", b"a/b", b"empty", b"\xff\xfe dir", b"sticky"):
        os.mkdir(base + b"/" + name)
    files = {
        b"plain.txt": b"hello",
        b"new\nline.txt": b"line1\nline2\n",
        b"two  spaces - and dash ": b"",
        b"caf\xe9-latin1": b"latin",
        "caf\u00e9-utf8".encode(): b"utf8",
        b"back\\0slash": b"x" * 70000,
        b"\xff\xfe dir/inner": b"",
        b"a/b/deep.log": b"deep",
        b"a/keep": b"k",
    }
    for name, data in files.items():
        with open(base + b"/" + name, "wb") as handle:
            handle.write(data)
    os.chmod(base + b"/plain.txt", 0o4755)
    os.chmod(base + b"/sticky", 0o1777)
    os.symlink(b"plain.txt", base + b"/link")
    os.symlink(b"/no where/\xff target", base + b"/dangling \xfe")
    os.mkfifo(base + b"/fifo")


async def _old(client: Any, **params: Any) -> FsSnapshot:
    result = await client.ok("get_filesystem_snapshot", **params)
    return FsSnapshot.from_result(result, root=params["root_path"])


async def _pages(client: Any, page_bytes: int | None = None, **params: Any) -> list[dict[str, Any]]:
    size = {} if page_bytes is None else {"page_bytes": page_bytes}
    pages = [await client.ok("get_filesystem_snapshot", format="lines", **params, **size)]
    while pages[-1].get("cursor"):
        cursor = pages[-1]["cursor"]
        pages.append(
            await client.ok("get_filesystem_snapshot", format="lines", cursor=cursor, **size)
        )
    return pages


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    _odd_tree(root)
    return root


@pytest.fixture(autouse=True)
def _gnu_find() -> None:
    if not fs_listing.find_prints():
        pytest.fail("these tests need GNU find with -printf on the host (findutils)")


@pytest.mark.parametrize(
    ("hash", "exclude", "lister"),
    [
        (False, None, "find"),
        (True, None, "scandir"),
        (False, ["*.log", "empty"], "find"),
        (False, ["{root}/a"], "find"),
        (False, ["[ab]*"], "scandir"),
        (False, ["{root}/a/"], "scandir"),
    ],
)
@pytest.mark.asyncio
async def test_lines_equal_the_json_format_on_the_same_tree(
    client: Any, tree: Path, hash: bool, exclude: list[str] | None, lister: str
) -> None:
    params: dict[str, Any] = {"root_path": str(tree), "hash": hash}
    if exclude is not None:
        params["exclude"] = [p.format(root=tree) for p in exclude]
    await _old(client, **{**params, "hash": True})  # reading sets atimes once (relatime)
    before = await _old(client, **params)
    pages = await _pages(client, **params)
    after = await _old(client, **params)
    assert before.entries == after.entries, "the tree changed under the test"
    lines = FsSnapshot.from_lines(pages, root=str(tree))
    assert lines.entries == before.entries
    assert {page["lister"] for page in pages} == {lister}
    if hash:
        assert lines[f"{tree}/plain.txt"].sha256 is not None
    assert lines[f"{tree}/dangling \udcfe"].target == "/no where/\udcff target"


@pytest.mark.asyncio
async def test_small_pages_hold_whole_records_and_add_up(client: Any, tree: Path) -> None:
    await _old(client, root_path=str(tree), hash=True)  # reading sets atimes once (relatime)
    whole = FsSnapshot.from_lines(await _pages(client, root_path=str(tree)), root=str(tree))
    for page_bytes in (1, 300):
        pages = await _pages(client, root_path=str(tree), page_bytes=page_bytes)
        assert len(pages) > 5
        assert sum(page["entries"] for page in pages) == len(whole)
        longest = max(len(os.fsencode(p)) for p in whole) + 200 + 512
        assert all(len(page["records"]) <= page_bytes + longest for page in pages)
        assert FsSnapshot.from_lines(pages, root=str(tree)).entries == whole.entries


@pytest.mark.asyncio
async def test_the_root_alone_when_it_is_a_file_or_a_link(client: Any, tree: Path) -> None:
    for name in ("plain.txt", "link"):
        root = str(tree / name)
        await _old(client, root_path=root)  # reading the link sets its atime once (relatime)
        lines = FsSnapshot.from_lines(await _pages(client, root_path=root), root=root)
        assert lines.entries == (await _old(client, root_path=root)).entries
        assert list(lines) == [root]


LISTENING = re.compile(r"adare_guest\.server: listening on (\S+:\d+)$")
UNPRIVILEGED_USER = "adare-unprivileged"
"""Made (as a system user without a home) for tests that must not run as root."""


def _unprivileged_ids() -> tuple[int, int]:
    """The uid and gid of :data:`UNPRIVILEGED_USER`, made first when missing (root only)."""
    try:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        made = subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                UNPRIVILEGED_USER,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode not in (0, 9):  # 9: made meanwhile by a parallel run
            pytest.fail(f"useradd {UNPRIVILEGED_USER} failed: {made.stderr.strip()}")
        user = pwd.getpwnam(UNPRIVILEGED_USER)
    return user.pw_uid, user.pw_gid


@pytest.fixture
def unprivileged_agent() -> Iterator[tuple[str, Path]]:
    """An agent process that cannot read everything (a user of its own when the tests run
    as root, as CI does), its URL, and a directory it can read to put trees in."""
    base = Path(tempfile.mkdtemp(prefix="adare-unprivileged-"))
    base.chmod(0o755)  # mkdtemp's 0700 would keep the other user out
    # The agent runs from a copy: the checkout may sit where that user cannot read.
    for package in ("adare_guest", "frame_codec"):  # what the agent bundle holds
        shutil.copytree(
            REPO / package,
            base / "code" / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    run_dir = base / "run"
    run_dir.mkdir()
    drop: list[str] = []
    if os.geteuid() == 0:
        uid, gid = _unprivileged_ids()
        os.chown(run_dir, uid, gid)
        drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    # The system Python: the venv's may live under /root, which that user cannot enter.
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    argv = [*drop, python, "-m", "adare_guest", str(run_dir), "--host", "127.0.0.1", "--port", "0"]
    proc = subprocess.Popen(
        argv,
        cwd=base / "code",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    listening = threading.Event()

    def read_log() -> None:  # also drains the pipe, so the agent never blocks on logging
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            if LISTENING.search(line):
                listening.set()
        listening.set()  # the agent ended: stop waiting

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        listening.wait(WAIT)
        address = next((m[1] for m in map(LISTENING.search, log) if m), None)
        if address is None:
            pytest.fail(f"the agent ({' '.join(argv)}) did not listen within {WAIT} s: {log}")
        yield f"ws://{address}", base
    finally:
        proc.terminate()
        proc.wait(WAIT)
        reader.join(WAIT)
        assert proc.stderr is not None
        proc.stderr.close()
        shutil.rmtree(base)


@pytest.mark.asyncio
async def test_unreadable_directories_are_reported_in_both_formats(
    unprivileged_agent: tuple[str, Path], strict_client_class: Any
) -> None:
    url, base = unprivileged_agent
    tree = base / "tree"
    tree.mkdir()
    _odd_tree(tree)
    client = strict_client_class(await connect(url, max_size=None, compression=None))
    (tree / "a").chmod(0)
    try:
        await _old(client, root_path=str(tree), hash=True)  # reading sets atimes once (relatime)
        old = await client.ok("get_filesystem_snapshot", root_path=str(tree))
        pages = await _pages(client, root_path=str(tree))
    finally:
        (tree / "a").chmod(0o755)
        await client.close()
    lines = FsSnapshot.from_lines(pages, root=str(tree))
    assert lines.entries == FsSnapshot.from_result(old, root=str(tree)).entries
    assert [e["path"] for e in lines.errors] == [e["path"] for e in old["errors"]] == [f"{tree}/a"]
    assert f"{tree}/a" in lines  # the directory itself is listed, only its contents are not


@pytest.mark.asyncio
async def test_a_missing_root_an_unknown_cursor_and_a_bad_page_size_fail_clearly(
    client: Any, tmp_path: Path
) -> None:
    missing = await client.ok(
        "get_filesystem_snapshot", format="lines", root_path=str(tmp_path / "nope")
    )
    assert missing["status"] == "error" and "cannot snapshot" in missing["message"]
    unknown = await client.ok("get_filesystem_snapshot", format="lines", cursor="feed")
    assert unknown["status"] == "error" and "no snapshot in progress" in unknown["message"]
    bad = await client.ok("get_filesystem_snapshot", format="lines", page_bytes=0)
    assert bad["status"] == "error" and "page_bytes" in bad["message"]
    with pytest.raises(SnapshotFormatError, match="no snapshot in progress"):
        SnapshotPages("/").add(unknown)


@pytest.mark.asyncio
async def test_a_listing_past_its_deadline_ends_with_an_error(client: Any) -> None:
    first = await client.ok(
        "get_filesystem_snapshot", format="lines", root_path="/usr", page_bytes=1, timeout=1
    )
    assert first["cursor"] is not None
    await _sleep(1.2)
    late = await client.ok("get_filesystem_snapshot", format="lines", cursor=first["cursor"])
    assert late["status"] == "error" and late["complete"] is False
    assert "timed out" in late["message"] or "no snapshot in progress" in late["message"]


async def _sleep(seconds: float) -> None:
    # Deferred: only this test waits.
    import asyncio

    await asyncio.sleep(seconds)


GOOD = "f 5 644 0 0 7 1.5 2.0 3.0 - /x\0\0"


@pytest.mark.parametrize(
    ("records", "complaint"),
    [
        (GOOD[:-1], "whole"),
        ("f 5 644 0 0 7 1.5 2.0 - /x\0\0", "fields|not a"),
        ("f five 644 0 0 7 1.5 2.0 3.0 - /x\0\0", "record 1"),
        ("f 5 9z 0 0 7 1.5 2.0 3.0 - /x\0\0", "record 1"),
        ("f 5 644 0 0 7 1.x 2.0 3.0 - /x\0\0", "bad time"),
        ("f 5 644 0 0 7 1.5 2.0 3.0 abc /x\0\0", "sha256"),
    ],
)
def test_the_host_refuses_malformed_records(records: str, complaint: str) -> None:
    page = {"status": "success", "format": "lines", "records": records, "cursor": None}
    with pytest.raises(SnapshotFormatError, match=complaint):
        SnapshotPages("/").add(page)


def test_the_host_refuses_miscounted_pages_and_pages_that_stop_early() -> None:
    page = {"status": "success", "format": "lines", "records": GOOD * 2, "cursor": None}
    with pytest.raises(SnapshotFormatError, match="seen twice"):
        SnapshotPages("/").add(page)
    with pytest.raises(SnapshotFormatError, match="announces 3"):
        SnapshotPages("/").add({**page, "records": GOOD, "entries": 3})
    with pytest.raises(SnapshotFormatError, match="before the last"):
        FsSnapshot.from_lines([{**page, "records": GOOD, "cursor": "more"}], root="/")


@pytest.mark.parametrize("module", [fs_listing, entry_module, snapshot_module])
def test_docstring_examples_hold(module: Any) -> None:
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_find_is_used_only_where_its_patterns_mean_the_same() -> None:
    assert fs_listing.find_argv("/srv", ["/srv/a", "*.log"], True, ()) is not None
    for exclude in (["[!a]"], ["a\\*"], ["/srv/"], ["/"], [""], ["/srv"]):
        assert fs_listing.find_argv("/srv", exclude, True, ()) is None, exclude
    assert fs_listing.find_argv("-rf", [], True, ()) is None
    assert shutil.which("find")
