"""The writable share's id maps and checks (no VM): who the guest's users are on the host,
and the folders that are refused before virtiofsd starts."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pytest_adare.host_access import ShareSpec
from pytest_adare.machine_tools.share import ShareError
from pytest_adare.qemu.virtiofs import (
    GUEST_USER_ID,
    NOBODY,
    IdMaps,
    check_reachable,
    id_maps,
)


def test_as_root_the_guests_user_is_the_folders_owner_and_its_root_nobody(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    os.chown(folder, 4321, 4321)  # an owner without a passwd entry: its group is the folder's
    maps = id_maps(ShareSpec(str(folder), "/src", writable=True), runner_uid=0)
    assert maps == IdMaps(
        uids=((0, NOBODY, 1), (GUEST_USER_ID, 4321, 1)),
        gids=((0, NOBODY, 1), (GUEST_USER_ID, 4321, 1)),
    )
    assert maps.owner == 4321
    assert maps.arg("uid") == f"0 {NOBODY} 1 1000 4321 1"


def test_as_root_a_folder_root_owns_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ShareError, match="the folder is root's, and the guest's user would"):
        id_maps(ShareSpec(str(tmp_path), "/src", writable=True), runner_uid=0)


def test_an_ordinary_user_may_share_only_their_own_folder(tmp_path: Path) -> None:
    os.chown(tmp_path, 4321, 4321)
    with pytest.raises(ShareError, match=r"a folder you own \(its owner is uid 4321, you are 5"):
        id_maps(ShareSpec(str(tmp_path), "/src", writable=True), runner_uid=5)


def test_an_ordinary_user_without_subordinate_ids_is_told_how_to_get_them(
    tmp_path: Path,
) -> None:
    os.chown(tmp_path, 4321, 4321)  # no passwd entry, so no /etc/subuid line either
    with pytest.raises(ShareError, match="sudo usermod --add-subuids"):
        id_maps(ShareSpec(str(tmp_path), "/src", writable=True), runner_uid=4321)


def test_a_folder_below_a_directory_closed_to_others_is_refused_naming_it() -> None:
    # Under /tmp itself: pytest's own tmp_path sits below a directory closed to others.
    top = Path(tempfile.mkdtemp(prefix="adare-virtiofs-", dir="/tmp"))
    try:
        top.chmod(0o755)
        closed = top / "closed"
        folder = closed / "project"
        folder.mkdir(parents=True)
        closed.chmod(0o700)
        spec = ShareSpec(str(folder), "/src", writable=True)
        stranger = os.getuid() + 4321
        with pytest.raises(ShareError, match=rf"{closed} is not theirs and closed to others"):
            check_reachable(spec, stranger)
        check_reachable(spec, os.getuid())  # the owner's own directory: reachable
        closed.chmod(0o711)
        check_reachable(spec, stranger)  # open to others
    finally:
        shutil.rmtree(top)
