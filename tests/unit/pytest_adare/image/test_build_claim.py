"""What a build killed outright leaves (its work directory, its partial image, in root
mode what mmdebstrap had mounted) is reaped by the next build: its own user's, once no
process of it lives, mounts detached first, never another user's or a live build's
(issue 34 item 7). Real processes killed with SIGKILL, real mounts where root.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from pytest_adare.image.build import reap_dead_builds
from pytest_adare.image.build_claim import PARTIAL_MARK, Claim, mounts_inside, reap
from pytest_adare.image.userns import HostRoot

# A build: claims a directory, starts a child that inherits the claim (as mmdebstrap
# does), says where, and waits to be killed.
BUILDER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from pytest_adare.image.build_claim import Claim
    claim = Claim(Path(sys.argv[1]), sys.argv[2])
    child = subprocess.Popen(["sleep", "600"], pass_fds=(claim.fd,))
    print(claim.path, child.pid, flush=True)
    time.sleep(600)
""")


def _start_builder(parent: Path, prefix: str) -> tuple[subprocess.Popen[str], Path, int]:
    builder = subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(parent), prefix],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert builder.stdout is not None
    with builder.stdout:  # one line is all it says; an open pipe would leak past the test
        path, child = builder.stdout.readline().split()
    return builder, Path(path), int(child)


def _kill(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it has exited (its descriptors closed)."""
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # a grandchild: init reaps it
        os.waitpid(pid, 0)
        return
    stat = Path(f"/proc/{pid}/stat")
    for _ in range(3000):  # a zombie, or gone: exited either way
        with contextlib.suppress(FileNotFoundError):
            if stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                time.sleep(0.01)
                continue
        return
    raise AssertionError(f"process {pid} still runs after SIGKILL")


def test_a_killed_builds_directory_is_reaped_once_its_last_process_is_gone(
    tmp_path: Path,
) -> None:
    builder, work, child = _start_builder(tmp_path, "adare-build-")
    removed: list[Path] = []
    try:
        (work / "rootfs").mkdir()
        assert reap(tmp_path, "adare-build-", removed.append) == []  # alive
        builder.kill()
        builder.wait()
        # mmdebstrap outlives a SIGKILLed builder and still works in there.
        assert reap(tmp_path, "adare-build-", removed.append) == []
    finally:
        _kill(child)
    assert reap(tmp_path, "adare-build-", removed.append) == [work] == removed


def test_only_this_users_and_only_the_named_kind_are_reaped(tmp_path: Path) -> None:
    mine = tmp_path / f".img{PARTIAL_MARK}abc"
    mine.mkdir()
    other_kind = tmp_path / ".img.old-1"
    other_kind.mkdir()
    gone: list[Path] = []
    if os.geteuid() == 0:
        theirs = tmp_path / f".img{PARTIAL_MARK}def"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
    assert reap(tmp_path, ".", gone.append, contains=PARTIAL_MARK) == [mine]
    claim = Claim(tmp_path, f".img{PARTIAL_MARK}")
    try:
        assert reap(tmp_path, ".", gone.append, contains=PARTIAL_MARK) == [mine]  # not the live one
    finally:
        claim.release()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_what_a_killed_root_build_left_mounted_is_detached_and_never_crossed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    images = tmp_path / "images"
    images.mkdir()
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "keep").write_text("the host's file\n")
    builder, work, child = _start_builder(tmp_path / "tmp", "adare-build-")
    stage_builder, stage, stage_child = _start_builder(images, f".debian-x{PARTIAL_MARK}")
    for point in ("rootfs/proc", "rootfs/sys", "rootfs/mnt"):
        (work / point).mkdir(parents=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(work / "rootfs/proc")], check=True)
    subprocess.run(["mount", "--rbind", "/sys", str(work / "rootfs/sys")], check=True)
    subprocess.run(["mount", "--bind", str(host), str(work / "rootfs/mnt")], check=True)
    try:
        for process in (builder, stage_builder):
            process.kill()
            process.wait()  # through Popen, which then knows it has ended
        for pid in (child, stage_child):
            _kill(pid)
        reap_dead_builds(images, HostRoot())
    finally:
        subprocess.run(["umount", "-R", "-l", str(work / "rootfs/sys")], check=False)
        for point in ("rootfs/proc", "rootfs/mnt"):
            subprocess.run(["umount", "-l", str(work / point)], check=False)
    assert mounts_inside(tmp_path) == []
    assert not work.exists() and not stage.exists()
    assert (host / "keep").read_text() == "the host's file\n"
