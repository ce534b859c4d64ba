"""A recipe over a disk that is not built in: boot it, run the steps, keep a clean layer.

The base is ``bios-qga`` from ``distro_disks.py`` (the cheapest: systemd, QGA, no
cloud-init). One recipe installs a package with the guest's apt, copies a file and a
unit, runs commands and enables the unit; its image is a qcow2 layer over the base, and
a fresh VM of it has the software, the unit started, and no trace of the build; in it,
with no way off its link, the build's install step says the guest has no network. One
recipe fails at its second step. Three boots of the base in all (≈ 40 s each under TCG).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from distro_disks import distro_disks
from test_recipes import LEFT_BY_APT, adare_image, image_dirs

from pytest_adare import launch
from pytest_adare.errors import ImageError
from pytest_adare.image.build import file_sha256
from pytest_adare.image.resolve import resolve_image
from pytest_adare.image_provision import build_on_disk, detect_package_manager, install_packages

pytestmark = pytest.mark.e2e

MARKER = "adare-build-marker-23"
# No way off the link: no default route, no IPv6. The host's forward to the agent
# arrives on the link, so the agent still answers.
OFFLINE = (
    "for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do echo 1 > $f; done; "
    "ip route del default"
)


@pytest.fixture(scope="module")
def base_disk() -> Path:
    """``bios-qga`` from the distro disks (built by scripts/test; else here, ≈ 5 min)."""
    return distro_disks(log=print) / "bios-qga.qcow2"


def test_a_recipe_over_a_distro_disk_is_a_clean_layer(
    base_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "motd").write_text("built by a recipe\n")
    (tmp_path / "booted.service").write_text(
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/bin/sh -c 'uptime > /run/booted'\n[Install]\nWantedBy=multi-user.target\n"
    )
    recipe = tmp_path / "with-hello.toml"
    recipe.write_text(
        f'base = "{base_disk}"\ninstall = ["hello"]\n'
        f'provision = ["echo {MARKER}-stdout", "logger {MARKER}-journal", '
        f'"echo {MARKER} > /root/provisioned"]\n'
        'services = ["booted.service"]\n'
        '[[files]]\nsource = "motd"\ndest = "/etc/motd"\nmode = "0644"\n'
        '[[files]]\nsource = "booted.service"\ndest = "/etc/systemd/system/booted.service"\n'
    )
    built = adare_image(str(recipe), cache=tmp_path / "cache")
    assert built.returncode == 0, built.stdout + built.stderr
    for phase in ("boot", "install", "files", "provision", "services", "poweroff", "disk"):
        assert f" {phase} " in built.stdout
    manifest_path = Path(built.stdout.strip().splitlines()[-1])
    data = json.loads(manifest_path.read_text())
    assert data["base_sha256"] == file_sha256(base_disk)
    assert data["steps"]["install"] == ["hello"]
    assert data["steps"]["services"] == ["booted.service"]
    info = json.loads(subprocess.run(
        ["qemu-img", "info", "--output=json", str(manifest_path.parent / "disk.qcow2")],
        capture_output=True, text=True, check=True,
    ).stdout)  # fmt: skip
    assert info["backing-filename"] == str(base_disk)  # a layer, not a copy
    assert info["actual-size"] < base_disk.stat().st_size / 2

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    again = adare_image(str(recipe), cache=tmp_path / "cache")
    assert "not rebuilt" in again.stdout

    with launch(manifest_path, progress=None) as vm:
        guest = vm.guest
        assert "Hello, world!" in guest.succeed("hello")
        assert guest.succeed("cat /etc/motd /root/provisioned") == (
            f"built by a recipe\n{MARKER}\n"
        )
        # The recipe's unit was enabled in the booted base and started at this boot.
        guest.wait_for_unit("booted.service", timeout=60)
        assert guest.succeed("systemctl is-enabled booted.service").strip() == "enabled"
        assert "load average" in guest.succeed("cat /run/booted")
        # No trace of the build: its agent, logs, history and package caches are gone.
        assert MARKER not in vm.agent_log_tail(1000)
        assert MARKER not in "\n".join(vm.console_tail(1000))
        journal = guest.shell("journalctl -b -1 --no-pager; journalctl --no-pager")
        assert MARKER not in journal.stdout
        assert guest.succeed(LEFT_BY_APT) == ""
        assert not guest.shell("test -e /root/.bash_history").ok

        # A guest without a network says so, naming what it tried: the build's install
        # step in this VM once nothing leaves its link (the agent's own connection stays).
        guest.succeed(OFFLINE)
        with pytest.raises(ImageError) as offline:
            install_packages(guest, detect_package_manager(guest), ("hello",))
        message = str(offline.value)
        assert message.startswith("the guest has no network: apt-get update -q could not reach")
        assert "deb.debian.org" in message.splitlines()[0]


def test_a_failing_step_over_a_distro_disk_names_it_and_builds_nothing(
    base_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    recipe = tmp_path / "fails.toml"
    recipe.write_text(f'base = "{base_disk}"\nprovision = ["true", "echo half way; exit 4"]\n')
    with pytest.raises(ImageError) as caught:
        resolve_image(recipe, booted=build_on_disk)
    assert "provision step 2 ('echo half way; exit 4') failed with exit code 4" in str(caught.value)
    assert "half way" in str(caught.value)
    assert image_dirs(tmp_path) == []
