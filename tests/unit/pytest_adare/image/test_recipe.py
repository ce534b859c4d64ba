"""What the built-in recipes carry, and which changes rename (rebuild) an image."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image import recipe as recipe_module
from pytest_adare.image.manifest import BUILTIN_IMAGES
from pytest_adare.image.recipe import builtin_recipe, debian_recipe
from pytest_adare.image.rootfs import install_adare_layout


def test_console_image_carries_nft_and_only_the_nf_tables_and_virtiofs_modules() -> None:
    console = debian_recipe()
    assert "nftables" in console.packages
    assert console.rootfs_modules == ("nf_tables", "virtiofs")  # a writable share's
    assert console.rootfs_module_dirs == ()


def test_desktop_image_has_no_firewall_of_its_own() -> None:
    desktop = debian_recipe(desktop=True)
    assert "nftables" not in desktop.packages
    assert desktop.rootfs_modules == ("virtiofs",)


def test_an_optional_field_at_its_default_leaves_the_hash_alone() -> None:
    desktop = replace(debian_recipe(desktop=True), rootfs_modules=())
    with_modules = replace(desktop, rootfs_modules=("nf_tables",))
    assert "rootfs_modules" not in desktop._hashed_fields()
    assert with_modules.recipe_hash() != desktop.recipe_hash()


def test_changing_the_console_modules_renames_the_image() -> None:
    console = debian_recipe()
    assert replace(console, rootfs_modules=()).recipe_hash() != console.recipe_hash()
    assert replace(console, rootfs_modules=("nf_tables", "nft_reject_inet")).recipe_hash() != (
        console.recipe_hash()
    )


def test_desktop_image_carries_the_demo_dialog_and_what_it_runs_on() -> None:
    desktop = debian_recipe(desktop=True)
    assert "demo-dialog.sh" in desktop.scripts
    assert {"python3-tk", "fonts-dejavu-core"} <= set(desktop.packages)
    assert "demo-dialog.sh" not in debian_recipe().scripts
    script = desktop.script("demo-dialog.sh").decode()
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    program = script.split("<<'PYTHON'\n", 1)[1].rsplit("PYTHON\n", 1)[0]
    compile(program, "demo-dialog.sh (python)", "exec")
    assert "import tkinter" in program


def test_the_systemd_image_is_the_console_image_with_systemd_as_pid_1() -> None:
    console, systemd = debian_recipe(), builtin_recipe("debian-systemd")
    assert systemd == debian_recipe(init="systemd")
    assert (systemd.name, systemd.init, console.init) == ("debian-systemd", "systemd", "busybox")
    assert set(console.packages) < set(systemd.packages)
    assert {"systemd-sysv", "udev", "dbus", "libpam-systemd"} <= set(systemd.packages)
    assert "net.ifnames=0" in systemd.append.split()
    # Debian's qemu-ga unit and systemd's shutdown replace the busybox scripts.
    assert not {"qga-service.sh", "shutdown.sh"} & set(systemd.scripts)
    assert systemd.recipe_hash() != console.recipe_hash()
    assert builtin_recipe("debian-systemd:bullseye").name == "debian-systemd-bullseye"
    with pytest.raises(ImageError, match="init 'openrc' is not one of busybox, systemd"):
        debian_recipe(init="openrc")


def test_the_systemd_layout_enables_the_adare_units_and_keeps_the_journal(
    tmp_path: Path,
) -> None:
    rootfs, overlay, bundle = tmp_path / "root", tmp_path / "overlay", tmp_path / "bundle.pyz"
    (rootfs / "bin").mkdir(parents=True)
    # The root's own /sbin/init is an absolute link that must not be read on the host.
    (rootfs / "sbin").mkdir()
    (rootfs / "sbin/init").symlink_to("/lib/systemd/systemd-not-on-this-host")
    (rootfs / "bin/busybox").symlink_to(shutil.which("true") or "/bin/true")
    bundle.write_bytes(b"PK")
    overlay.mkdir()
    install_adare_layout(debian_recipe(init="systemd"), rootfs, overlay, bundle, "/dev/hvc0")
    system = overlay / "etc/systemd/system"
    for unit in ("adare-sysinit.service", "adare-agent.service"):
        link = system / "multi-user.target.wants" / unit
        assert link.readlink() == Path("/etc/systemd/system") / unit
        assert "[Install]\nWantedBy=multi-user.target" in (system / unit).read_text()
    assert "ExecStart=/adare/init/agent-service.sh" in (system / "adare-agent.service").read_text()
    qga = system / r"dev-virtio\x2dports-org.qemu.guest_agent.0.device.wants"
    assert (qga / "qemu-guest-agent.service").is_symlink()
    assert (overlay / "etc/fstab").read_text().split()[:3] == ["/dev/vda", "/", "ext4"]
    assert (overlay / "var/log/journal").is_dir()
    assert not (overlay / "etc/inittab").exists() and not (overlay / "sbin").exists()


def test_the_xfce_image_is_the_desktop_on_systemd_with_lightdm_and_xfce() -> None:
    desktop, systemd, xfce = (
        debian_recipe(desktop=True), builtin_recipe("debian-systemd"), builtin_recipe("debian-xfce")
    )  # fmt: skip
    assert xfce == debian_recipe(desktop=True, init="systemd")
    assert (xfce.name, xfce.init, xfce.desktop, xfce.user) == (
        "debian-xfce",
        "systemd",
        True,
        "user",
    )
    # systemd's packages and the console's; like debian-desktop's, no firewall tools.
    assert set(systemd.packages) - set(xfce.packages) == {"nftables"}
    assert {
        "lightdm",
        "xfwm4",
        "xfdesktop4",
        "xfce4-panel",
        "thunar",
        "mousepad",
        "ristretto",
        "xfce4-terminal",
        "xdg-user-dirs",
        "gvfs",
        "dbus-user-session",
    } <= set(xfce.packages)
    # No busybox session: openbox, the scripted session and its respawn are the old desktop's.
    assert "openbox" not in xfce.packages and not xfce.inittab_extra
    assert "desktop-session.sh" not in xfce.scripts
    assert (xfce.kernel_package, xfce.display) == (desktop.kernel_package, desktop.display)
    assert "net.ifnames=0" in xfce.append.split()
    assert xfce.ready_command is not None and "xfce4-terminal" in xfce.ready_command
    # The LightDM hooks are shell scripts sh can read; the config files are in the hash.
    for name in ("xfce-display.sh", "xfce-session.sh"):
        subprocess.run(["sh", "-n"], input=xfce.script(name), check=True)
    changed = recipe_module.replace(xfce, scripts=xfce.scripts[:-1])
    assert changed.recipe_hash() != xfce.recipe_hash()
    assert builtin_recipe("debian-xfce:bullseye").name == "debian-xfce-bullseye"


def test_the_xfce_layout_makes_lightdm_log_the_user_into_xfce(tmp_path: Path) -> None:
    rootfs, overlay, bundle = tmp_path / "root", tmp_path / "overlay", tmp_path / "bundle.pyz"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin/busybox").symlink_to(shutil.which("true") or "/bin/true")
    panel = rootfs / "etc/xdg/xfce4/panel/default.xml"
    panel.parent.mkdir(parents=True)
    panel.write_text('<channel name="xfce4-panel" version="1.0"/>\n')
    bundle.write_bytes(b"PK")
    overlay.mkdir()
    xfce = builtin_recipe("debian-xfce")
    install_adare_layout(xfce, rootfs, overlay, bundle, "/dev/hvc0")
    conf = (overlay / "etc/lightdm/lightdm.conf.d/50-adare.conf").read_text()
    assert "autologin-user=user\n" in conf and "autologin-session=xfce\n" in conf
    assert "session-setup-script=/adare/init/xfce-session.sh" in conf
    assert (overlay / "etc/systemd/system/display-manager.service").readlink() == Path(
        "/lib/systemd/system/lightdm.service"
    )
    channels = overlay / "etc/xdg/xfce4/xfconf/xfce-perchannel-xml"
    assert (channels / "xfce4-panel.xml").read_text() == panel.read_text()
    assert 'name="KeyRepeat" type="bool" value="false"' in (channels / "keyboards.xml").read_text()
    autostart = (overlay / "etc/xdg/autostart/adare-terminal.desktop").read_text()
    assert "Exec=/adare/init/xfce-terminal.sh\n" in autostart
    init = overlay / "adare/init"
    assert {"xfce-display.sh", "xfce-session.sh", "xfce-terminal.sh"} <= {
        p.name for p in init.iterdir()
    }
    # Started once the window manager manages the screen, then the terminal itself.
    terminal = (init / "xfce-terminal.sh").read_text()
    assert "_NET_SUPPORTING_WM_CHECK" in terminal
    assert terminal.rstrip().endswith("exec xfce4-terminal --geometry=100x30+40+40")
    assert not list(init.glob("*.xml")) and not list(init.glob("*.conf"))
    env = (init / "agent.env").read_text()
    assert "export XAUTHORITY='/var/run/lightdm/root/:0'" in env and "export DISPLAY=':0'" in env
    # A root whose panel default is a symlink (or missing) is refused, not followed.
    panel.unlink()
    panel.symlink_to("/etc/passwd")
    with pytest.raises(ImageError, match=r"panel/default\.xml is missing"):
        install_adare_layout(xfce, rootfs, tmp_path / "overlay2", bundle, "/dev/hvc0")


def test_every_built_in_name_has_a_recipe_and_the_other_way_round() -> None:
    assert set(BUILTIN_IMAGES) == set(recipe_module._FLAVOURS)
    for name in BUILTIN_IMAGES:
        assert builtin_recipe(name).name == name
