"""A recipe build SIGKILLed mid-mmdebstrap, as root (issue 34 item 7): it leaves its
partial image, its work directory with the staged 0600 copy of a private file, and the
host's /proc, /sys and /dev nodes mounted in its root file system; what the next build
runs first (``reap_dead_builds``) removes all of it, mounts detached first.

Before, nothing removed them: the stage stayed in the cache, the copy was 0644 and the
mounts stayed until reboot. One build up to its first mounts, then killed (about a
minute under load).
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_adare.image.build import reap_dead_builds
from pytest_adare.image.build_claim import PARTIAL_MARK, WORK_PREFIX, mounts_inside
from pytest_adare.image.userns import HostRoot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap mounts in the root only as root"),
]
REPO = Path(__file__).resolve().parents[2]
RECIPE = """\
base = "debian"
name = "killed"
provision = ["true"]
[[files]]
source = "private.txt"
dest = "/etc/private"
"""


def _work_dirs(tmp: Path) -> set[Path]:
    return {p for p in tmp.iterdir() if p.name.startswith(WORK_PREFIX)}


def _wait_for_mounts(tmp: Path, before: set[Path], build: subprocess.Popen[str]) -> Path:
    """The new build's work directory, once mmdebstrap mounted something in it."""
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        for work in _work_dirs(tmp) - before:
            if mounts_inside(work):
                return work
        if build.poll() is not None:
            raise AssertionError(f"the build ended first:\n{build.communicate()[0][-2000:]}")
        time.sleep(0.5)
    raise AssertionError("mmdebstrap mounted nothing in 1200 s")


def test_what_a_killed_build_left_is_reaped_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "private.txt").write_text("private\n")
    (tmp_path / "private.txt").chmod(0o600)
    (tmp_path / "killed.toml").write_text(RECIPE)
    tmp = Path(tempfile.gettempdir())
    before = _work_dirs(tmp)
    build = subprocess.Popen(
        [sys.executable, "-m", "pytest_adare.image_cli", "build", str(tmp_path / "killed.toml")],
        cwd=REPO, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        work = _wait_for_mounts(tmp, before, build)
    finally:
        os.killpg(build.pid, signal.SIGKILL)  # the builder, mmdebstrap, apt, dpkg
        build.communicate()
    images = cache / "pytest-adare/images"
    staged = work / "hooks/files/0"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600
    assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
    partial = [p for p in images.iterdir() if PARTIAL_MARK in p.name]
    assert partial, sorted(images.iterdir())
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    _wait_until_unclaimed(work)
    reap_dead_builds(images, HostRoot())
    assert not work.exists() and mounts_inside(work) == []
    assert [p for p in images.iterdir() if PARTIAL_MARK in p.name] == []


def _wait_until_unclaimed(work: Path) -> None:
    """Until the last process of the killed build has exited (SIGKILL is not instant)."""
    deadline = time.monotonic() + 60
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{work} is still claimed 60 s after SIGKILL") from None
                time.sleep(0.2)
    finally:
        os.close(fd)
