"""The adare paper's experiments: a file deleted, and a file opened, through a real GUI.

The image is the built-in desktop extended by a recipe (``fm_desktop/fm-desktop.toml``:
pcmanfm, mousepad and a document in the user's Documents), built on first use and
cached. The user deletes the document with the file manager's context menu: the
freedesktop Trash must then hold it and a ``.trashinfo`` whose DeletionDate is the
guest's clock at the moment of the click. Or opens it with a double click: the editor
shows it and ``recently-used.xbel`` records it. Or browses a photo: the thumbnail cache holds its
thumbnail, named by the md5 of the photo's URI as the freedesktop spec says.
"""

import hashlib
import os
import re
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath

import pytest
from PIL import Image

from pytest_adare.guest import Guest
from pytest_adare.plugin.checks import SoftChecks

RECIPE = Path(__file__).parent / "fm_desktop" / "fm-desktop.toml"


@pytest.mark.adare_vm(image=str(RECIPE), gui=True)
def test_a_file_deleted_in_the_file_manager_lands_in_the_trash(
    guest: Guest, adare_checks: SoftChecks
) -> None:
    user = guest.user
    trash = f"{user.home}/.local/share/Trash"
    before = guest.fs_snapshot(user.home)

    manager = user.start(f"pcmanfm {user.documents}")
    guest.wait_for_window("Documents", timeout=60)
    guest.click_text("report.txt", timeout=60, button="right")
    # The deletion happens between the menu click and the icon gone: the guest's clock
    # read on both sides brackets it, however slow the guest is.
    clicked_at = guest.now()
    guest.click_text("Move to Trash", timeout=30)
    guest.wait_for_text("report.txt", timeout=30, gone=True)
    gone_at = guest.now()
    guest.wait_for_file(f"{trash}/info/report.txt.trashinfo", timeout=30)

    diff = guest.fs_snapshot(user.home).diff(before)
    assert f"{user.documents}/report.txt" in diff.deleted
    assert {f"{trash}/files/report.txt", f"{trash}/info/report.txt.trashinfo"} <= diff.created

    # The paper's checks as written: adare's variables name the user's directories.
    adare_checks.run(
        "the document is in the Trash", "standard.file_exists",
        path="{{ adare_user_home }}/.local/share/Trash/files/report.txt",
    )  # fmt: skip
    adare_checks.run(
        "it is gone from Documents", "standard.file_absent",
        path="{{ adare_user_documents }}/report.txt",
    )  # fmt: skip
    info = guest.succeed(f"cat {trash}/info/report.txt.trashinfo")
    adare_checks.check(
        f"Path={user.documents}/report.txt" in info, "the trashinfo names where it was", info
    )
    stamp = next(line.split("=", 1)[1] for line in info.splitlines() if line.startswith("Deletion"))
    # DeletionDate is the guest's local time without a zone, in whole seconds; the guest
    # runs on UTC.
    deletion = datetime.fromisoformat(stamp).replace(tzinfo=gone_at.tzinfo)
    adare_checks.check(
        clicked_at - timedelta(seconds=1) <= deletion <= gone_at,
        "DeletionDate is the guest's clock between the click and the icon gone",
        f"DeletionDate={stamp}, guest clock {clicked_at.isoformat()} .. {gone_at.isoformat()}",
    )
    manager.stop()


@pytest.mark.adare_vm(image=str(RECIPE), gui=True)
def test_a_file_opened_in_the_file_manager_is_recently_used(
    guest: Guest, adare_checks: SoftChecks
) -> None:
    user = guest.user
    recent = f"{user.home}/.local/share/recently-used.xbel"
    manager = user.start(f"pcmanfm {user.documents}")
    guest.wait_for_window("Documents", timeout=60)
    clicked_at = guest.now()
    guest.click_text("report.txt", timeout=60, clicks=2)
    # The editor's title names the file. Starting mousepad takes seconds on an idle TCG
    # guest and over a minute on a loaded 2-core host; the wait ends as soon as it shows.
    guest.wait_for_window("report.txt", timeout=180)
    opened_at = guest.now()
    guest.wait_until_succeeds(f"grep -q Documents/report.txt {recent}", timeout=30)

    xbel = guest.succeed(f"cat {recent}")
    entry = re.search(r'<bookmark href="file://[^"]*/Documents/report\.txt"[^>]*>', xbel)
    assert entry is not None, xbel
    adare_checks.check("mousepad" in xbel.lower(), "the editor is named as the application")
    added = re.search(r'added="([^"]+)"', entry.group(0))
    assert added is not None, entry.group(0)
    # recently-used.xbel holds UTC with a Z; the guest's clock is compared in UTC.
    when = datetime.fromisoformat(added.group(1).replace("Z", "+00:00"))
    # Written when the editor opened the file: between the double click and the window,
    # give or take the second the stamp may be truncated to.
    adare_checks.check(
        clicked_at - timedelta(seconds=1) <= when <= opened_at + timedelta(seconds=1),
        "added is the guest's clock between the double click and the editor's window",
        f"added={added.group(1)}, guest clock {clicked_at.isoformat()} .. {opened_at.isoformat()}",
    )
    manager.stop()


def a_camera_photo(path: Path) -> Path:
    """A 1200x900 PNG of ≈ 2.6 MiB, red on the left, blue on the right, with sensor noise.

    Above libfm's ``thumbnail_max`` (2 MiB) like most camera photos, so pcmanfm hands it
    to the image thumbnailer, whose thumbnails it keeps on disk (docs/images.md).
    """
    noise = Image.frombytes("RGB", (1200, 900), os.urandom(1200 * 900 * 3))
    photo = Image.new("RGB", (1200, 900), (230, 20, 20))
    photo.paste((20, 20, 230), (600, 0, 1200, 900))
    Image.blend(photo, noise, 0.25).save(path)
    assert path.stat().st_size > 2 << 20
    return path


@pytest.mark.adare_vm(image=str(RECIPE), gui=True)
def test_a_photo_browsed_in_the_file_manager_gets_a_cached_thumbnail(
    guest: Guest, tmp_path: Path
) -> None:
    user = guest.user
    pictures = user.dirs["PICTURES"]
    photo = f"{pictures}/holiday.png"
    guest.push(a_camera_photo(tmp_path / "holiday.png"), "/tmp/holiday.png")
    user.run(f"cp /tmp/holiday.png {photo}").check()  # the user copies it off a camera

    manager = user.start(f"pcmanfm {pictures}")  # icon view, thumbnails on: the defaults
    guest.wait_for_window("Pictures", timeout=60)
    # The freedesktop thumbnail spec: $XDG_CACHE_HOME/thumbnails/normal/<md5 of the URI>.png
    # (normal: 128 px, what an icon view asks for; XDG_CACHE_HOME unset: ~/.cache).
    uri = PurePosixPath(photo).as_uri()
    cache = f"{user.home}/.cache/thumbnails"
    thumbnail = f"{cache}/normal/{hashlib.md5(uri.encode()).hexdigest()}.png"
    guest.wait_for_file(thumbnail, timeout=60)
    guest.wait_until_succeeds(f"tail -c 12 {thumbnail} | grep -q IEND", timeout=30)  # all written

    owners = guest.succeed(f"stat -c '%U %a' {cache} {thumbnail}").splitlines()
    assert owners[0] == "user 700"  # the cache is private to its user
    assert owners[1].split()[0] == "user"
    with Image.open(guest.pull(thumbnail, tmp_path / "thumbnail.png")) as thumb:
        assert thumb.format == "PNG" and thumb.size == (128, 96)  # 1200x900 at 128 px
        rgb = thumb.convert("RGB")
        left, right = rgb.getpixel((10, 48)), rgb.getpixel((118, 48))
        assert isinstance(left, tuple) and isinstance(right, tuple)
        assert left[0] > left[2] and right[2] > right[0], (left, right)  # it is the photo
        # pcmanfm 1.3.2 does not add the spec's Thumb::URI / Thumb::MTime chunks to what
        # the thumbnailer wrote (its re-save is skipped: libfm issue 79); when it does,
        # they must name this photo.
        assert thumb.info.get("Thumb::URI", uri) == uri
    manager.stop()
