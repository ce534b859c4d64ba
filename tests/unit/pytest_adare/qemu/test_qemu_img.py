"""qemu-img failures name what could not be done and carry its command and output."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_adare.errors import VMLaunchError
from pytest_adare.qemu.qemu_img import qemu_img


def test_a_failing_qemu_img_says_what_and_shows_its_output(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-base.qcow2"
    with pytest.raises(VMLaunchError, match="could not create the overlay disk") as caught:
        qemu_img("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(missing),
                 str(tmp_path / "overlay.qcow2"), what="create the overlay disk")  # fmt: skip
    assert caught.value.command[:2] == ["qemu-img", "create"]
    assert "no-such-base" in caught.value.output


def test_a_working_qemu_img_leaves_its_result(tmp_path: Path) -> None:
    out = tmp_path / "disk.qcow2"
    qemu_img("create", "-q", "-f", "qcow2", str(out), "1M", what="create a disk")
    assert out.stat().st_size > 0
