"""Per-VM hand-off to built-in images: by initrd where the image takes it, else fw_cfg."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from pytest_adare.agent.install import (
    FW_CFG_BUNDLE,
    FW_CFG_CONFIG,
    prepare_boot_handoff,
    uses_boot_handoff,
)
from pytest_adare.image.agent_bundle import build_agent_bundle
from pytest_adare.image.initrd import CpioWriter
from pytest_adare.image.manifest import AgentSpec, ImageManifest

BUSYBOX = shutil.which("busybox")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _image(tmp_path: Path, *, baked_hash: str, initrd_handoff: bool) -> ImageManifest:
    cpio = CpioWriter()
    cpio.directory("bin")
    cpio.file("init", b"#!/bin/sh\n", 0o755)
    initrd = tmp_path / "image" / "initrd.gz"
    initrd.parent.mkdir()
    initrd.write_bytes(zlib.compress(cpio.finish(), wbits=31))
    agent = AgentSpec(
        baked=True, bundle_hash=baked_hash, fw_cfg=True, initrd_handoff=initrd_handoff
    )
    return ImageManifest(
        name="t", disk=tmp_path / "image" / "disk.qcow2", kernel=tmp_path / "k", initrd=initrd,
        agent=agent,
    )  # fmt: skip


def _unpack_like_the_kernel(initrd: Path, into: Path) -> None:
    """Unpack every concatenated gzip'ed cpio archive into ``into``, in order."""
    assert BUSYBOX is not None
    into.mkdir()
    data = initrd.read_bytes()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        archive = inflater.decompress(data)
        data = inflater.unused_data
        subprocess.run(
            [BUSYBOX, "cpio", "-i", "-d", "-u"],
            input=archive,
            cwd=into,
            check=True,
            capture_output=True,
        )


@pytest.mark.skipif(BUSYBOX is None, reason="busybox (apt: busybox-static) reads the cpio")
def test_a_newer_bundle_and_the_config_go_in_the_initrd(tmp_path: Path) -> None:
    image = _image(tmp_path, baked_hash="old", initrd_handoff=True)
    bundle = build_agent_bundle()
    handoff = prepare_boot_handoff(image, tmp_path / "vm1", {"token": "one"}, bundle)
    assert (handoff.route, handoff.fw_cfg, handoff.replaced) == ("initrd", {}, True)
    assert handoff.describe() == "config + newer bundle via initrd"
    assert handoff.initrd is not None
    _unpack_like_the_kernel(handoff.initrd, tmp_path / "root")
    root = tmp_path / "root"
    assert (root / "init").read_bytes() == b"#!/bin/sh\n"
    assert json.loads((root / "handoff/config.json").read_text()) == {"token": "one"}
    assert (root / "handoff/bundle.pyz").read_bytes() == bundle.path.read_bytes()


@pytest.mark.skipif(BUSYBOX is None, reason="busybox (apt: busybox-static) reads the cpio")
def test_each_vm_gets_its_config_on_the_shared_cached_bundle_initrd(tmp_path: Path) -> None:
    image = _image(tmp_path, baked_hash="old", initrd_handoff=True)
    bundle = build_agent_bundle()
    first = prepare_boot_handoff(image, tmp_path / "vm1", {"token": "one"}, bundle)
    cached = sorted((tmp_path / "cache" / "pytest-adare" / "handoff").iterdir())
    assert len(cached) == 1
    mtime = cached[0].stat().st_mtime_ns
    second = prepare_boot_handoff(image, tmp_path / "vm2", {"token": "two"}, bundle)
    assert sorted((tmp_path / "cache" / "pytest-adare" / "handoff").iterdir()) == cached
    assert cached[0].stat().st_mtime_ns == mtime
    assert first.initrd is not None and second.initrd is not None
    assert first.initrd != second.initrd
    assert second.initrd.read_bytes().startswith(cached[0].read_bytes())
    _unpack_like_the_kernel(second.initrd, tmp_path / "root")
    assert json.loads((tmp_path / "root/handoff/config.json").read_text()) == {"token": "two"}


@pytest.mark.skipif(BUSYBOX is None, reason="busybox (apt: busybox-static) reads the cpio")
def test_the_baked_bundle_is_not_sent_again(tmp_path: Path) -> None:
    bundle = build_agent_bundle()
    image = _image(tmp_path, baked_hash=bundle.bundle_hash, initrd_handoff=True)
    handoff = prepare_boot_handoff(image, tmp_path / "vm1", {"token": "one"}, bundle)
    assert (handoff.replaced, handoff.describe()) == (False, "config via initrd")
    assert handoff.initrd is not None
    _unpack_like_the_kernel(handoff.initrd, tmp_path / "root")
    assert not (tmp_path / "root/handoff/bundle.pyz").exists()
    assert (tmp_path / "root/handoff/config.json").exists()


def test_images_without_initrd_hand_off_get_fw_cfg(tmp_path: Path) -> None:
    image = _image(tmp_path, baked_hash="old", initrd_handoff=False)
    bundle = build_agent_bundle()
    assert uses_boot_handoff(image)
    handoff = prepare_boot_handoff(image, tmp_path / "vm1", {"token": "one"}, bundle)
    assert (handoff.route, handoff.initrd, handoff.replaced) == ("fw_cfg", None, True)
    assert handoff.fw_cfg[FW_CFG_BUNDLE] == bundle.path
    assert json.loads(handoff.fw_cfg[FW_CFG_CONFIG].read_text()) == {"token": "one"}
