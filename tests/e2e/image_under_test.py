"""Which images the e2e tests boot.

``$ADARE_TEST_IMAGE`` / ``$ADARE_TEST_DESKTOP_IMAGE`` (a manifest, its directory, a
disk or a built-in name), else the built-in ``debian`` / ``debian-desktop`` images,
built on first use and cached (``scripts/test`` builds them before pytest runs).
"""

from __future__ import annotations

import os

from pytest_adare.image.manifest import ImageManifest
from pytest_adare.image.resolve import resolve_image


def image_under_test() -> ImageManifest:
    """The manifest of the console image to boot."""
    return resolve_image(os.environ.get("ADARE_TEST_IMAGE") or "debian")


def desktop_image_under_test() -> ImageManifest:
    """The manifest of the desktop image to boot."""
    return resolve_image(os.environ.get("ADARE_TEST_DESKTOP_IMAGE") or "debian-desktop")
