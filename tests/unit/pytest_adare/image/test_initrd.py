"""The built-in images' initrd: module order, the cpio writer, the per-VM hand-off."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.initrd import build_initrd, handoff_initrd, module_load_order

BUSYBOX = shutil.which("busybox")


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    """A kernel modules directory shaped like Debian's (files are placeholders)."""
    root = tmp_path / "modules"
    deps = {
        "kernel/drivers/virtio/virtio.ko": [],
        "kernel/drivers/virtio/virtio_ring.ko": [],
        "kernel/drivers/virtio/virtio_pci.ko": [
            "kernel/drivers/virtio/virtio_ring.ko",
            "kernel/drivers/virtio/virtio.ko",
        ],
        "kernel/drivers/block/virtio_blk.ko": [
            "kernel/drivers/virtio/virtio_ring.ko",
            "kernel/drivers/virtio/virtio.ko",
        ],
        "kernel/drivers/firmware/qemu_fw_cfg.ko": [],
    }
    for path in deps:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(path.encode())
    (root / "modules.dep").write_text(
        "".join(f"{path}: {' '.join(d)}\n" for path, d in deps.items())
    )
    (root / "modules.builtin").write_text("kernel/fs/ext4/ext4.ko\n")
    return root


def test_modules_load_after_their_dependencies_once(modules: Path) -> None:
    order = module_load_order(modules, ["virtio_pci", "virtio_blk", "ext4", "qemu-fw-cfg"])
    names = [p.rsplit("/", 1)[1] for p in order]
    assert names == [
        "virtio.ko",
        "virtio_ring.ko",
        "virtio_pci.ko",
        "virtio_blk.ko",
        "qemu_fw_cfg.ko",
    ]


def test_unknown_module_is_an_error(modules: Path) -> None:
    with pytest.raises(ImageError, match="kernel module nosuch is not in"):
        module_load_order(modules, ["nosuch"])


def _extract(archive: bytes, into: Path) -> None:
    assert BUSYBOX is not None
    into.mkdir()
    subprocess.run(
        [BUSYBOX, "cpio", "-i", "-d"], input=archive, cwd=into, check=True, capture_output=True
    )


@pytest.mark.skipif(BUSYBOX is None, reason="busybox (apt: busybox-static) reads the cpio")
def test_initrd_holds_init_busybox_and_modules_in_order(modules: Path, tmp_path: Path) -> None:
    fake_busybox = tmp_path / "busybox"
    fake_busybox.write_bytes(b"\x7fELF-ish")
    out = tmp_path / "initrd.gz"
    loaded = build_initrd(modules, ["virtio_blk"], fake_busybox, b"#!/bin/sh\n", out)
    assert loaded == ["virtio", "virtio_ring", "virtio_blk"]
    _extract(gzip.decompress(out.read_bytes()), tmp_path / "x")
    root = tmp_path / "x"
    assert (root / "init").read_bytes() == b"#!/bin/sh\n"
    assert (root / "init").stat().st_mode & 0o777 == 0o755
    assert (root / "bin/busybox").read_bytes() == b"\x7fELF-ish"
    assert (root / "modules/order").read_text().split() == loaded
    assert (root / "modules/virtio_blk.ko").read_bytes() == b"kernel/drivers/block/virtio_blk.ko"


@pytest.mark.skipif(BUSYBOX is None, reason="busybox (apt: busybox-static) reads the cpio")
def test_handoff_appends_files_after_the_base_initrd(tmp_path: Path) -> None:
    base = tmp_path / "base.gz"
    base.write_bytes(gzip.compress(b"base archive"))
    config = tmp_path / "config.json"
    config.write_text('{"token": "t"}')
    out = handoff_initrd(base, {"config.json": config}, tmp_path / "vm-initrd.gz")
    data = out.read_bytes()
    assert data.startswith(base.read_bytes())
    _extract(gzip.decompress(data[len(base.read_bytes()) :]), tmp_path / "x")
    assert (tmp_path / "x/handoff/config.json").read_text() == '{"token": "t"}'
    with pytest.raises(ImageError, match="unknown hand-off file"):
        handoff_initrd(base, {"evil.sh": config}, tmp_path / "other.gz")
