"""Marker needs and image errors: decided from the manifest, before any VM boots."""

from __future__ import annotations

import json

import pytest

NEEDS = """
import pytest

@pytest.mark.adare_vm(gui=True)
def test_needs_desktop(guest):
    pass

@pytest.mark.adare_vm(os="windows")
def test_needs_windows(guest):
    pass

@pytest.mark.adare_vm(gui="host")
def test_needs_desktop_with_host_gui(async_guest):
    pass
"""


def test_unmet_needs_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    (pytester.path / "disk.qcow2").write_bytes(b"")
    (pytester.path / "adare-image.json").write_text(
        json.dumps({"name": "console", "disk": "disk.qcow2", "format": "qcow2", "os": "linux"})
    )
    pytester.makepyfile(NEEDS)
    result = pytester.runpytest("-rs", "--adare-vm=adare-image.json")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*needs a desktop (adare_vm gui=...) but image * has none; use a desktop image*",
            "SKIPPED*needs a windows guest but image * is linux*",
        ]
    )


def test_missing_image_is_an_error_naming_it_once_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_a(guest):
            pass

        def test_b(guest):
            pass
        """
    )
    result = pytester.runpytest("--adare-vm=nowhere/adare-image.json")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*adare: no image at *nowhere/adare-image.json*"])
    result.stdout.fnmatch_lines(["*broken since an earlier failure; first cause:", "no image at*"])
