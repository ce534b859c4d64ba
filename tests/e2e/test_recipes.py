"""Recipes on a built-in base end to end: a real file manager on the desktop, the cache
hit, and what bad input is told (a failing provision step: test_recipe_own_disk.py and
the build log's reading in tests/unit/pytest_adare/image/test_recipe_files.py).

``conftest_examples/fm_desktop/fm-desktop.toml`` (pcmanfm on the built-in desktop) is
built by ``scripts/test`` beside the built-in images; the bad inputs each start an
mmdebstrap in a private cache that fails (the unknown package once apt resolves, ≈ 30 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_adare import launch
from pytest_adare.image.resolve import resolve_image

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FM_DESKTOP = REPO / "conftest_examples/fm_desktop/fm-desktop.toml"
LEFT_BY_APT = "find /var/lib/apt/lists /var/cache/apt -name '*.deb' -o -name '*Packages*'"


def adare_image(*argv: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = None if cache is None else {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "pytest_adare.image_cli", "build", *argv],
        capture_output=True, text=True, timeout=1800, env=env, cwd=REPO,
    )  # fmt: skip


def image_dirs(cache: Path) -> list[str]:
    images = cache / "pytest-adare/images"
    if not images.is_dir():  # refused before anything was built or locked
        return []
    return sorted(p.name for p in images.iterdir() if not p.name.endswith(".lock"))


def test_the_file_manager_recipe_is_reused_from_the_cache_with_one_line() -> None:
    resolve_image(FM_DESKTOP)  # built by scripts/test; built here otherwise
    lines: list[str] = []
    began = time.monotonic()
    manifest = resolve_image(FM_DESKTOP, progress=lines.append)
    assert time.monotonic() - began < 5
    assert len(lines) == 1 and "is cached at" in lines[0] and "not rebuilt" in lines[0]
    assert manifest.user == "user" and manifest.steps is not None
    assert manifest.steps["install"] == ["pcmanfm", "mousepad", "libgdk-pixbuf2.0-bin"]
    assert manifest.steps["files"][0]["dest"] == "/home/user/Documents/report.txt"


def test_a_recipe_on_the_built_in_desktop_installs_a_real_file_manager() -> None:
    with launch(FM_DESKTOP, progress=None) as vm:
        guest = vm.guest
        assert guest.succeed("command -v pcmanfm").strip() == "/usr/bin/pcmanfm"
        # The image thumbnailer a Debian desktop has: pcmanfm keeps only what it writes.
        assert guest.shell("test -f /usr/share/thumbnailers/gdk-pixbuf-thumbnailer.thumbnailer").ok
        # pcmanfm wants a session bus; dbus-x11 stood for it, and no init came along.
        assert guest.succeed("readlink /sbin/init").strip() == "/bin/busybox"
        assert not guest.shell("dpkg -s systemd-sysv").ok
        assert guest.succeed("stat -c %U:%a /home/user/Documents/report.txt") == "user:644\n"
        assert guest.user.run("cat Documents/report.txt").stdout.startswith("Quarterly")
        assert "bookworm" in guest.succeed("cat /etc/apt/sources.list")
        assert guest.succeed(LEFT_BY_APT) == ""
        # The session is the desktop user's, with what a display manager and logind give.
        owners = guest.succeed("ps -e -o user,comm | grep -E 'openbox|xterm|dbus-daemon'")
        assert {line.split()[0] for line in owners.splitlines()} == {"user"}
        assert (guest.user.name, guest.user.uid, guest.user.home) == ("user", 1000, "/home/user")
        assert guest.user.downloads == "/home/user/Downloads"
        session = guest.user.run(
            "echo $LANG $XDG_RUNTIME_DIR; stat -c %a $XDG_RUNTIME_DIR; id -un; "
            "dbus-send --session --print-reply --dest=org.freedesktop.DBus "
            "/org/freedesktop/DBus org.freedesktop.DBus.GetId >/dev/null && echo bus"
        ).check()
        assert session.stdout == "C.UTF-8 /run/user/1000\n700\nuser\nbus\n"


@pytest.mark.parametrize(
    ("argv", "message", "built"),
    [
        (["--install", "no-such-package-23"],
         "unknown package 'no-such-package-23': Debian bookworm", True),
        # Refused when the suite is asked for, before a build starts.
        (["--install", "hello", "--mirror", "http://127.0.0.1:9/debian"],
         "no network: the build cannot reach the package mirror http://127.0.0.1:9/debian",
         False),
    ],
    ids=["unknown-package", "no-network"],
)  # fmt: skip
def test_bad_input_on_a_built_in_base_is_named_and_leaves_the_cache(
    tmp_path: Path, argv: list[str], message: str, built: bool
) -> None:
    failed = adare_image("debian", "--name", "bad", *argv, cache=tmp_path)
    assert failed.returncode == 1, failed.stdout
    assert message in failed.stderr
    assert image_dirs(tmp_path) == []
    if not built:
        return
    # The log it names is still there (it was in the partial image, removed with it).
    named = re.search(r"last lines of (\S+\.log)", failed.stderr)
    assert named is not None, failed.stderr
    log = Path(named.group(1))
    assert log.is_relative_to(tmp_path / "pytest-adare/build-logs"), log
    assert "mmdebstrap" in log.read_text()
