"""Saved ready states keep the agent's token private (issue 27, item 13).

``state.bin`` (guest RAM) and ``disk.qcow2`` (the agent's config) hold the token as
much as ``meta.json`` does: every file is 0600, every directory from the cache root
down 0700, and a state another user could have written is not loaded (the VM boots
cold, saying why). Real files and modes, real ownership where the test runs as root.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.cache_dir import cache_root
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine_tools.saved_state import (
    SavedState,
    UntrustedState,
    find_state,
    save_machine_state,
    states_root,
)
from pytest_adare.warm_start import boot_files
from tests.unit.pytest_adare.test_warm_start import fake_machine, plan


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache of our own, under the usual umask."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0o022)
    try:
        yield cache_root()
    finally:
        os.umask(old)


@pytest.fixture
def image(tmp_path: Path) -> ImageManifest:
    """A direct-boot image (warm start needs a kernel)."""
    (tmp_path / "vmlinuz").write_bytes(b"kernel")
    return ImageManifest(name="t", disk=None, kernel=tmp_path / "vmlinuz", memory_mib=256)


def save(image: ImageManifest, tmp_path: Path) -> SavedState:
    key = plan(image, states_root()).key
    overlay = tmp_path / "overlay.qcow2"
    overlay.write_bytes(b"overlay holding config.json and its token")
    handoff = tmp_path / "handoff-initrd.gz"
    handoff.write_bytes(b"initrd with the token")
    files, names = boot_files(handoff, {})
    meta = {"agent_token": "tok", "fw_cfg": names}
    return asyncio.run(save_machine_state(fake_machine(overlay), key, files, meta))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_file_is_0600_and_every_directory_down_from_the_cache_root_0700(
    image: ImageManifest, tmp_path: Path, cache: Path
) -> None:
    saved = save(image, tmp_path)
    files = [saved.state, saved.disk, saved.directory / "meta.json", saved.file("initrd")]
    assert {str(f.relative_to(cache)): mode(f) for f in files} == {
        str(f.relative_to(cache)): 0o600 for f in files
    }
    directories = [cache, states_root(), saved.directory, saved.directory / "boot"]
    assert [oct(mode(d)) for d in directories] == ["0o700"] * 4


@pytest.mark.parametrize(
    "victim",
    ["state.bin", "disk.qcow2", "meta.json", "boot/initrd", ".", "boot", "../..", ".."],
)
def test_a_state_that_group_or_others_may_write_is_not_loaded_and_the_vm_boots_cold(
    image: ImageManifest, tmp_path: Path, cache: Path, victim: str
) -> None:
    saved = save(image, tmp_path)
    target = (saved.directory / victim).resolve()
    target.chmod(mode(target) | 0o020)
    with pytest.raises(UntrustedState, match="writable by group or others"):
        find_state(saved.key)
    cold = plan(image, states_root())
    assert cold.key is None and cold.saved is None
    assert f"{target} is writable by group or others" in cold.reason
    assert cold.reason.endswith("booting cold") and "\n" not in cold.reason


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("victim", ["state.bin", "meta.json", "."])
def test_a_state_owned_by_another_user_is_not_loaded(
    image: ImageManifest, tmp_path: Path, cache: Path, victim: str
) -> None:
    saved = save(image, tmp_path)
    os.chown(saved.directory / victim, 4242, 4242)
    cold = plan(image, states_root())
    assert cold.key is None and "owned by uid 4242" in cold.reason


def test_a_symlink_in_the_state_is_not_loaded(
    image: ImageManifest, tmp_path: Path, cache: Path
) -> None:
    saved = save(image, tmp_path)
    elsewhere = tmp_path / "elsewhere.bin"
    saved.state.rename(elsewhere)
    saved.state.symlink_to(elsewhere)
    assert "is a symlink" in plan(image, states_root()).reason


def test_a_state_saved_before_the_rule_is_made_private_when_found(
    image: ImageManifest, tmp_path: Path, cache: Path
) -> None:
    saved = save(image, tmp_path)
    for path in (cache, states_root(), saved.directory):
        path.chmod(0o755)
    for path in (saved.state, saved.disk, saved.file("initrd")):
        path.chmod(0o644)
    again = plan(image, states_root())
    assert again.saved is not None
    assert [mode(p) for p in (cache, states_root(), saved.directory)] == [0o700] * 3
    assert [mode(p) for p in (saved.state, saved.disk, saved.file("initrd"))] == [0o600] * 3
