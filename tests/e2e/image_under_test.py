"""Which image the e2e tests boot.

``$ADARE_TEST_IMAGE`` (a manifest path), else the manifest path written to
``/tmp/adare-image-ready.txt`` by an image build, else ``resolve_image("debian")``
(the built-in image, built on first use and cached).
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_adare.image.manifest import ImageManifest, load_manifest, resolve_image

READY_FILE = Path("/tmp/adare-image-ready.txt")


def image_under_test() -> ImageManifest:
    """The manifest of the image to boot."""
    if os.environ.get("ADARE_TEST_IMAGE"):
        return load_manifest(os.environ["ADARE_TEST_IMAGE"])
    if READY_FILE.is_file() and READY_FILE.read_text().strip():
        return load_manifest(READY_FILE.read_text().strip())
    return resolve_image("debian")
