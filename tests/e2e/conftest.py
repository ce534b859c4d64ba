"""Fixtures shared by the end-to-end modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.vm import VM


@pytest.fixture(scope="module")
def console_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    """One booted built-in console VM for the whole module."""
    manifest = image_under_test()
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path_factory.mktemp("vm"), progress=None
    ) as running:
        yield running
