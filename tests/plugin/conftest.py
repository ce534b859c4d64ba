"""The plugin is tested from the outside, as a user runs it: pytester writes test files
and runs pytest on them. E2E tests boot the image named by ``ADARE_TEST_IMAGE``
(default: the built-in ``debian``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _shared_image_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs get pytester's fresh HOME; point them at this user's image cache so a
    built-in image is built once, not once per test."""
    from pytest_adare.cache_dir import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root().parent))


@pytest.fixture(scope="session")
def test_image() -> str:
    """The ``--adare-vm`` value the e2e tests boot."""
    return os.environ.get("ADARE_TEST_IMAGE", "debian")
