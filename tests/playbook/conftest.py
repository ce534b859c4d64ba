"""Playbook tests: the experiments in ``experiments/`` are inputs of the tests here, not
tests of this suite (they run inside pytester runs)."""

from __future__ import annotations

import os

import pytest

collect_ignore = ["experiments"]


@pytest.fixture(autouse=True)
def _shared_image_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs get pytester's fresh HOME; they share this user's image cache."""
    from pytest_adare.cache_dir import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root().parent))


@pytest.fixture(scope="session")
def test_image() -> str:
    return os.environ.get("ADARE_TEST_IMAGE", "debian")
