"""What the image cache hands out: an entry of a trusted owner whose files are its own
and whose disk hashes as built, else an error naming what did not match (issue 34,
item 5; the same attacks by a second ordinary user: tests/e2e/test_shared_cache_attacks.py).

The test runs as root when CI does, so "another user" is a uid it chowns files to."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.cache import cached_image, image_dir
from pytest_adare.image.recipe import debian_recipe
from pytest_adare.image.resolve import resolve_image

STRANGER = 54321
"""A uid nobody here is: the owner of what another member of the cache planted."""
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty shared image cache, sticky and world-writable as a group cache may be."""
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o1777)
    monkeypatch.setenv("ADARE_IMAGE_CACHE", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "own"))
    monkeypatch.delenv("ADARE_IMAGE_CACHE_TRUST", raising=False)
    old = os.umask(0o022)
    try:
        yield root
    finally:
        os.umask(old)


def built_entry(**changes: Any) -> Path:
    """What a build leaves for the console image: a disk, a kernel, an initrd, a manifest."""
    entry = image_dir(debian_recipe())
    entry.mkdir()
    for name in ("disk.qcow2", "vmlinuz", "initrd.gz"):
        (entry / name).write_bytes(f"the {name} as built".encode())
    manifest: dict[str, Any] = {
        "name": "debian", "disk": "disk.qcow2", "format": "qcow2", "kernel": "vmlinuz",
        "initrd": "initrd.gz", "disk_sha256": file_sha256(entry / "disk.qcow2"),
        "recipe_hash": debian_recipe().recipe_hash(), **changes,
    }  # fmt: skip
    (entry / "adare-image.json").write_text(json.dumps(manifest))
    return entry


def test_an_entry_built_by_this_user_is_booted(shared: Path) -> None:
    entry = built_entry()
    assert resolve_image("debian").disk == entry / "disk.qcow2"


@as_root
def test_an_entry_of_another_member_is_refused_naming_its_owner_and_the_rule(
    shared: Path,
) -> None:
    entry = built_entry()
    for path in (entry, *entry.iterdir()):
        os.chown(path, STRANGER, STRANGER)
    with pytest.raises(ImageError) as refused:
        resolve_image("debian")
    message = str(refused.value)
    assert f"the cached image {entry.name} is not booted" in message
    assert f"belongs to {STRANGER} (uid {STRANGER}), who is not trusted" in message
    assert "ADARE_IMAGE_CACHE_TRUST" in message


@as_root
def test_a_member_named_in_the_trust_variable_is_booted(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = built_entry()
    for path in (entry, *entry.iterdir()):
        os.chown(path, STRANGER, STRANGER)
    monkeypatch.setenv("ADARE_IMAGE_CACHE_TRUST", f"nobody, {STRANGER}")
    assert resolve_image("debian").disk == entry / "disk.qcow2"


@as_root
def test_the_owner_of_the_cache_directory_is_trusted(shared: Path) -> None:
    entry = built_entry()
    os.chown(shared, STRANGER, STRANGER)  # e.g. the CI account that fills the cache
    for path in (entry, *entry.iterdir()):
        os.chown(path, STRANGER, STRANGER)
    assert cached_image(debian_recipe()) == entry / "adare-image.json"


def test_an_unknown_name_in_the_trust_variable_is_an_error(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built_entry()
    monkeypatch.setenv("ADARE_IMAGE_CACHE_TRUST", "no-such-user-here")
    with pytest.raises(ImageError, match="names 'no-such-user-here', which is no user here"):
        resolve_image("debian")


@pytest.mark.parametrize(
    "field, value",
    [("disk", "/etc/hostname"), ("disk", "../outside.qcow2"), ("kernel", "/boot/../etc/hostname")],
)
def test_a_manifest_naming_a_file_outside_its_entry_is_refused(
    shared: Path, field: str, value: str
) -> None:
    (shared / "outside.qcow2").write_bytes(b"another image's disk")
    built_entry(**{field: value})
    with pytest.raises(ImageError, match=rf"its manifest's '{field}' names .*, outside the"):
        resolve_image("debian")


def test_a_disk_that_is_a_symlink_out_of_the_entry_is_refused(shared: Path) -> None:
    entry = built_entry()
    victim = shared.parent / "id_ed25519"
    victim.write_bytes(b"secret")
    (entry / "disk.qcow2").unlink()
    (entry / "disk.qcow2").symlink_to(victim)
    with pytest.raises(ImageError, match=rf"'disk' names {victim}, outside the image's"):
        resolve_image("debian")


def test_an_entry_that_is_a_symlink_is_refused(shared: Path) -> None:
    entry = built_entry()
    entry.rename(shared / "elsewhere")
    entry.symlink_to(shared / "elsewhere")
    with pytest.raises(ImageError, match=f"{entry} is a symbolic link, not a directory"):
        resolve_image("debian")


def test_a_file_others_may_write_is_refused(shared: Path) -> None:
    entry = built_entry()
    (entry / "initrd.gz").chmod(0o666)
    with pytest.raises(ImageError, match=r"initrd\.gz may be written by its group or others"):
        resolve_image("debian")


def test_a_shared_cache_others_may_write_must_be_sticky(shared: Path) -> None:
    built_entry()
    shared.chmod(0o777)
    with pytest.raises(ImageError, match=f"is not sticky.*chmod \\+t {shared}"):
        resolve_image("debian")


def test_an_entry_renamed_from_another_recipe_is_refused(shared: Path) -> None:
    built_entry(recipe_hash=debian_recipe(desktop=True).recipe_hash())
    with pytest.raises(ImageError, match=r"records the recipe hash \w+ \(renamed, or built from"):
        resolve_image("debian")


def test_a_disk_changed_after_the_build_is_refused_naming_both_hashes(shared: Path) -> None:
    entry = built_entry()
    resolve_image("debian")  # first use: hashed, and its signature recorded
    disk = entry / "disk.qcow2"
    before = disk.stat()
    recorded = file_sha256(disk)
    disk.write_bytes(b"the disk.qcow2 tampered")  # same size
    os.utime(disk, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    with pytest.raises(ImageError) as refused:
        resolve_image("debian")
    message = str(refused.value)
    assert f"has sha256 {file_sha256(disk)}, its manifest says {recorded}" in message


def test_a_manifest_without_a_disk_hash_is_refused(shared: Path) -> None:
    built_entry(disk_sha256=None)
    with pytest.raises(ImageError, match="records no disk_sha256"):
        resolve_image("debian")


def test_an_unchanged_disk_is_not_read_again(shared: Path) -> None:
    entry = built_entry()
    resolve_image("debian")
    opened: list[str] = []

    def watch(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and str(args[0]).endswith("disk.qcow2"):
            opened.append(str(args[0]))

    sys.addaudithook(watch)  # cannot be removed: it only ever appends to this list
    resolve_image("debian")
    resolve_image(str(entry))  # the entry named by its path passes the same checks
    assert opened == []
