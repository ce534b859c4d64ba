"""A shared image cache: where images go, the modes they are published with, the locks
every user of it may open (issue 29; reading it as another user: tests/e2e/test_rootless)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_adare.image.build import readable_by_all
from pytest_adare.image.cache import build_lock, image_dir, images_root, shared_image_cache
from pytest_adare.image.recipe import debian_recipe


def test_without_the_variable_images_live_in_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ADARE_IMAGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert shared_image_cache() is None
    assert images_root() == tmp_path / "pytest-adare/images"


def test_the_variable_points_every_image_at_the_shared_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADARE_IMAGE_CACHE", str(tmp_path / "shared"))
    recipe = debian_recipe()
    assert image_dir(recipe) == tmp_path / "shared" / f"debian-{recipe.recipe_hash()}"


def test_a_lock_in_the_shared_cache_is_group_writable_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADARE_IMAGE_CACHE", str(tmp_path))
    old = os.umask(0o077)
    try:
        with build_lock(tmp_path / "debian-0123", "building debian", timeout=5):
            held = stat.S_IMODE((tmp_path / "debian-0123.lock").stat().st_mode)
    finally:
        os.umask(old)
    assert held == 0o664
    assert not (tmp_path / "debian-0123.lock").exists()  # gone once released


def test_a_published_image_is_readable_by_all_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        image = tmp_path / "image"
        image.mkdir()
        (image / "disk.qcow2").write_bytes(b"disk")
    finally:
        os.umask(old)
    readable_by_all(image)
    assert stat.S_IMODE(image.stat().st_mode) == 0o755
    assert stat.S_IMODE((image / "disk.qcow2").stat().st_mode) == 0o644
