"""Fixtures shared by the end-to-end modules.

The plugin's own e2e tests run pytest on files pytester writes (an inner run, as a user
runs it); they boot the image named by ``ADARE_TEST_IMAGE`` (default: the built-in
``debian``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.vm import VM


@pytest.fixture(autouse=True)
def _shared_image_cache(request: pytest.FixtureRequest) -> None:
    """Inner runs get pytester's fresh HOME; point them at this user's image cache so a
    built-in image is built once, not once per test. A test without pytester keeps the
    environment it has."""
    if "pytester" not in request.fixturenames:
        return
    from pytest_adare.cache_dir import cache_root

    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root().parent))


@pytest.fixture(scope="session")
def test_image() -> str:
    """The ``--adare-vm`` value the plugin's e2e tests boot."""
    return os.environ.get("ADARE_TEST_IMAGE", "debian")


@pytest.fixture(scope="module")
def console_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    """One booted built-in console VM for the whole module."""
    manifest = image_under_test()
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path_factory.mktemp("vm"), progress=None
    ) as running:
        yield running
