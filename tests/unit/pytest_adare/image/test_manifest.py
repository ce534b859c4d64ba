"""Image manifests, the image cache's paths and its build lock."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.cache_dir import exclusive_lock
from pytest_adare.errors import ImageError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.cache import cached_image, image_dir, images_root
from pytest_adare.image.manifest import (
    AgentSpec,
    ImageManifest,
    load_manifest,
    write_manifest,
)
from pytest_adare.image.recipe import debian_recipe
from pytest_adare.image.resolve import resolve_image


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A directory with a tiny disk, kernel and initrd (contents do not matter here)."""
    for name in ("disk.qcow2", "vmlinuz", "initrd.gz"):
        (tmp_path / name).write_bytes(b"x")
    return tmp_path


def _write(directory: Path, data: dict[str, Any]) -> Path:
    path = directory / "adare-image.json"
    path.write_text(json.dumps(data))
    return path


def _valid(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "debian",
        "disk": "disk.qcow2",
        "format": "qcow2",
        "kernel": "vmlinuz",
        "initrd": "initrd.gz",
        "append": "console=ttyS0",
        "os": "linux",
        "agent": {
            "serial_device": "/dev/ttyS1",
            "baked": True,
            "version": "0.1.0",
            "bundle_hash": "ab",
            "run_dir": "/adare/run",
            "fw_cfg": True,
        },
        "desktop": True,
        "display": [1024, 768],
        "memory_mib": 256,
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}


def test_written_manifest_loads_back_with_absolute_paths(image: Path) -> None:
    manifest = ImageManifest(
        name="debian",
        disk=image / "disk.qcow2",
        kernel=image / "vmlinuz",
        initrd=image / "initrd.gz",
        append="console=ttyS0 quiet",
        agent=AgentSpec(baked=True, version="0.1.0", bundle_hash="abc", fw_cfg=True),
        desktop=True,
        display=(1024, 768),
        memory_mib=768,
        disk_sha256="00",
        recipe_hash="r1",
        built_at="2026-01-01T00:00:00+00:00",
    )
    path = write_manifest(manifest, image)
    assert json.loads(path.read_text())["disk"] == "disk.qcow2"
    loaded = load_manifest(path)
    assert loaded == ImageManifest(**{**manifest.__dict__, "path": path.resolve()})
    assert loaded.direct_boot


def test_manifest_survives_moving_its_directory(image: Path, tmp_path_factory: Any) -> None:
    _write(image, _valid())
    moved = tmp_path_factory.mktemp("elsewhere") / "img"
    image.rename(moved)
    assert load_manifest(moved / "adare-image.json").disk == moved / "disk.qcow2"


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"disk": ...}, "'disk'", "is missing"),
        ({"format": ...}, "'format'", "is missing"),
        ({"format": "iso"}, "'format'", "one of qcow2, raw, vmdk, vdi, vhdx, vpc"),
        ({"firmware": "coreboot"}, "'firmware'", "one of bios, uefi"),
        ({"os": "plan9"}, "'os'", "one of linux, windows"),
        ({"desktop": "yes"}, "'desktop'", "true or false"),
        ({"display": ...}, "'display'", "required when desktop is true"),
        ({"display": [1024]}, "'display'", "[width, height]"),
        ({"memory_mib": "lots"}, "'memory_mib'", "an integer"),
        ({"memory_mib": True}, "'memory_mib'", "an integer"),
        ({"memory_mib": 16}, "'memory_mib'", "at least 64"),
        ({"kernel": "bzImage"}, "'kernel'", "does not exist"),
        ({"kernel": ...}, "'initrd'", "needs a kernel"),
        ({"agent": {"serial_device": 1}}, "'agent.serial_device'", "a string"),
        ({"agent": {"baked": "no"}}, "'agent.baked'", "true or false"),
        ({"agent": []}, "'agent'", "an object"),
        ({"ready_command": ["true"]}, "'ready_command'", "a string"),
        ({"ready_command": "  "}, "'ready_command'", "must be a non-empty shell command"),
    ],
)
def test_bad_field_is_named_with_the_file(
    image: Path, changes: dict[str, Any], field: str, problem: str
) -> None:
    path = _write(image, _valid(**changes))
    with pytest.raises(ImageError) as caught:
        load_manifest(path)
    message = str(caught.value)
    assert str(path) in message
    assert f"field {field}" in message
    assert problem in message


@pytest.mark.parametrize(
    ("changes", "where", "key"),
    [
        ({"bios": "seabios"}, "", "'bios'"),
        ({"agent": {"baked": True, "delivery": "qga"}}, "in 'agent': ", "'delivery'"),
    ],
)
def test_an_unknown_key_is_an_error_naming_it_and_the_known_ones(
    image: Path, changes: dict[str, Any], where: str, key: str
) -> None:
    path = _write(image, _valid(**changes))
    with pytest.raises(ImageError) as caught:
        load_manifest(path)
    assert str(caught.value).startswith(f"{path}: {where}unknown field {key} (known: ")
    assert ("firmware" if not where else "serial_device") in str(caught.value)


def test_firmware_comes_from_the_manifest(image: Path) -> None:
    assert load_manifest(_write(image, _valid())).firmware == "bios"
    loaded = load_manifest(_write(image, _valid(firmware="uefi", format="vmdk")))
    assert (loaded.firmware, loaded.format, loaded.firmware_reason) == (
        "uefi", "vmdk", "from the manifest",
    )  # fmt: skip


def test_the_ready_command_comes_from_the_manifest(image: Path) -> None:
    assert load_manifest(_write(image, _valid())).ready_command is None
    command = "systemctl is-active nginx"
    assert load_manifest(_write(image, _valid(ready_command=command))).ready_command == command


def test_not_json_and_missing_file_are_clear(image: Path) -> None:
    (image / "adare-image.json").write_text("{ nope")
    with pytest.raises(ImageError, match="not valid JSON"):
        load_manifest(image / "adare-image.json")
    with pytest.raises(ImageError, match="cannot read image manifest"):
        load_manifest(image / "missing.json")


def test_optional_fields_take_defaults(image: Path) -> None:
    path = _write(image, {"disk": "disk.qcow2", "format": "qcow2"})
    manifest = load_manifest(path)
    assert (manifest.name, manifest.os, manifest.desktop, manifest.display) == (
        image.name,
        "linux",
        False,
        None,
    )
    assert manifest.agent == AgentSpec()
    assert not manifest.direct_boot


def test_resolve_accepts_manifest_file_and_directory(image: Path) -> None:
    path = _write(image, _valid())
    assert resolve_image(str(path)).path == path.resolve()
    assert resolve_image(str(image)).path == path.resolve()


def test_resolve_bare_disk_uses_firmware_boot_defaults(tmp_path: Path) -> None:
    disk = tmp_path / "guest.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    manifest = resolve_image(str(disk))
    assert (manifest.format, manifest.kernel, manifest.os, manifest.agent.baked) == (
        "qcow2",
        None,
        "linux",
        False,
    )
    raw = tmp_path / "other.raw"
    raw.write_bytes(b"\0" * 512)
    assert resolve_image(raw).format == "raw"


def test_resolve_rejects_what_is_not_an_image(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no image at"):
        resolve_image(str(tmp_path / "nothing-here"))
    with pytest.raises(ImageError, match=r"without adare-image\.json"):
        resolve_image(str(tmp_path))


def test_cache_dir_is_under_xdg_cache_home_and_named_by_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    console, desktop = debian_recipe(), debian_recipe(desktop=True)
    assert images_root() == tmp_path / "pytest-adare" / "images"
    assert image_dir(console) == images_root() / f"debian-{console.recipe_hash()}"
    assert image_dir(desktop).name.startswith("debian-desktop-")
    assert console.recipe_hash() == debian_recipe().recipe_hash()
    assert console.recipe_hash() != debian_recipe(suite="trixie").recipe_hash()


def test_cached_image_is_reused_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = image_dir(debian_recipe())
    target.mkdir(parents=True)
    (target / "disk.qcow2").write_bytes(b"x")
    recorded = {"disk_sha256": file_sha256(target / "disk.qcow2"),
                "recipe_hash": debian_recipe().recipe_hash()}  # fmt: skip
    path = _write(target, {"disk": "disk.qcow2", "format": "qcow2", **recorded})
    assert cached_image(debian_recipe()) == path


def _hold_lock(path: str, seconds: float, ready: Any) -> None:
    with exclusive_lock(Path(path), 10, "test"):
        ready.set()
        time.sleep(seconds)
        Path(path + ".released").touch()


def test_second_process_waits_for_the_build_lock(tmp_path: Path) -> None:
    lock = tmp_path / "image.lock"
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_lock, args=(str(lock), 1.0, ready))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(ImageError, match="another process still holds it"):
            with exclusive_lock(lock, 0.2, "building debian"):
                pass
        with exclusive_lock(lock, 10, "building debian"):
            assert (tmp_path / "image.lock.released").exists()
    finally:
        holder.join(10)
