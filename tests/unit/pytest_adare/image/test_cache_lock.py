"""The cache's lock file: it exists only while held, and a file planted where it goes is
never followed, written or chmodded (issue 34, items 4 and 16; the planted symlink of
another user of a shared cache: tests/e2e/test_shared_cache_attacks.py)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest

from pytest_adare.cache_dir import exclusive_lock
from pytest_adare.errors import ImageError
from pytest_adare.image.cache import build_lock


def test_a_failed_build_leaves_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = tmp_path / "pytest-adare/images/debian-0123"
    with pytest.raises(ImageError, match="mmdebstrap failed"):
        with build_lock(target, "building debian", timeout=5):
            assert target.with_name("debian-0123.lock").is_file()
            raise ImageError("mmdebstrap failed")
    assert list(target.parent.iterdir()) == []


def test_a_lock_left_by_an_older_run_is_taken_and_removed(tmp_path: Path) -> None:
    lock = tmp_path / "image.lock"
    lock.write_bytes(b"")
    with exclusive_lock(lock, 5, "building debian"):
        pass
    assert not lock.exists()


def test_a_symlink_where_the_lock_goes_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    victim = tmp_path / "id_ed25519"
    victim.write_bytes(b"secret")
    victim.chmod(0o600)
    lock = tmp_path / "image.lock"
    lock.symlink_to(victim)
    with pytest.raises(ImageError, match=r"image\.lock: it is a symbolic link"):
        with exclusive_lock(lock, 5, "building debian", mode=0o664):
            pass
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_bytes() == b"secret"


def test_a_fifo_where_the_lock_goes_is_refused_at_once(tmp_path: Path) -> None:
    lock = tmp_path / "image.lock"
    os.mkfifo(lock)  # opening it blocking would wait for a writer forever
    with pytest.raises(ImageError, match=r"is not a regular file \(a FIFO\); remove it"):
        with exclusive_lock(lock, 5, "building debian"):
            pass


def _count_under_lock(lock: str, counter: str, rounds: int) -> None:
    for _ in range(rounds):
        with exclusive_lock(Path(lock), 60, "counting"):
            value = int(Path(counter).read_text())
            time.sleep(0.01)  # a second holder would read the same value meanwhile
            Path(counter).write_text(str(value + 1))


def test_holders_never_overlap_while_each_removes_the_file_it_held(tmp_path: Path) -> None:
    lock, counter = tmp_path / "image.lock", tmp_path / "counter"
    counter.write_text("0")
    workers = [
        multiprocessing.Process(target=_count_under_lock, args=(str(lock), str(counter), 8))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert counter.read_text() == "32"  # no increment lost: one holder at a time
    assert not lock.exists()
