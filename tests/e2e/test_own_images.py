"""Bring your own image: Debian disks built the way distributions build them.

The disks come from ``distro_disks.py`` (UEFI and BIOS, systemd, QGA or cloud-init, an
installer's network configuration; built once and cached). Each variant boots through
the plugin in an inner pytest run with ``accel=auto`` and a fresh cache (the module's
first boot probes KVM on the disk itself; the later ones reuse its verdict) and passes
shell + file-system diff + pull + snapshot isolation; three variants boot in the form
another hypervisor exports (VDI, VHDX, VPC, VMDK), converted once to qcow2 by the plugin;
two have a firewall that drops inbound connections (ufw; nftables), which the plugin
opens for the agent's port; on one disk of each agent delivery (QGA, cloud-init) the
terminal (``adare-vm shell``) works as root and as other users. The failures that must
be fast and clear are checked with ``launch()`` and ``adare-image check``.

Eight boots in all (a TCG boot of a systemd guest takes ~40 s on a quiet host, a
cloud-init first boot ~150 s); the two failures end in ~35 s and ~70 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distro_disks import distro_disks

from pytest_adare import launch
from pytest_adare.errors import AgentUnreachable, VMDied
from tests.inner_run import run_inner_pytest

pytestmark = pytest.mark.e2e

INNER_TIMEOUT = 900

SCENARIO = """
def test_1_shell_diff_pull(guest, tmp_path):
    assert guest.shell("cat /proc/1/comm").stdout == "systemd\\n"
    with guest.watch_fs("/root") as watch:
        guest.shell("echo evidence > /root/left-behind").check()
    assert "/root/left-behind" in watch.diff.created
    pulled = guest.pull("/root/left-behind", tmp_path / "pulled")
    assert pulled.read_text() == "evidence\\n"

def test_2_snapshot_isolation(guest):
    assert guest.shell("ls /root/left-behind 2>/dev/null").stdout == ""
    assert guest.shell("echo alive").stdout == "alive\\n"

def test_3_firewall_state(guest):
    rules = guest.shell("nft list ruleset 2>/dev/null; iptables -S INPUT 2>/dev/null").stdout
    print("FIREWALL<<" + rules + ">>FIREWALL")
"""

# The terminal (adare-vm shell) on the agent this delivery started, as root, as
# guest.user and as a user made here; terminal_checks.py is on the inner PYTHONPATH.
TERMINAL_SCENARIO = """
from terminal_checks import check_terminal, registered

def test_4_terminal_as_root_and_as_users(guest, adare_vm):
    guest.shell("useradd --create-home --shell /bin/bash adare-tester").check()
    with registered(adare_vm, "distro disk") as name:
        check_terminal(name, None, "root")
        check_terminal(name, guest.user.name, guest.user.name)
        check_terminal(name, "adare-tester", "adare-tester")
"""
TERMINAL_VARIANTS = {"uefi-qga.vdi", "uefi-cloud"}
"""One variant per agent delivery (QGA, cloud-init) also runs the terminal: seconds,
not a boot."""


@pytest.fixture(scope="module")
def disks() -> Path:
    """The directory of the distro disks (built on first use, ≈ 5 min; then cached)."""
    return distro_disks(log=print)


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One empty pytest-adare cache for the module's inner runs: no accel verdict yet."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def inner(
    pytester: pytest.Pytester, fresh_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pytest.Pytester]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(fresh_cache))
    here = str(Path(__file__).parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )
    pytester.makepyfile(test_scenario=SCENARIO)
    yield pytester


def _ready_seconds(output: str) -> float:
    match = re.search(r"ready in ([\d.]+) s", output)
    assert match, output
    return float(match.group(1))


_UFW_OPENED = "-A INPUT -p tcp -m tcp --dport 18765 -j ACCEPT"
_NFT_OPENED = "tcp dport 18765 accept"


@pytest.mark.parametrize(
    ("variant", "firmware", "delivery", "firewall"),
    [
        # as VirtualBox and Hyper-V export them
        ("uefi-qga.vdi", "firmware: uefi (detected: GPT with an EFI system partition", "qga:",
         ()),
        ("bios-qga.vhdx", "firmware: bios (detected: MBR partition table)", "qga:", ()),
        ("bios-qga.vpc", "firmware: bios (detected: MBR partition table)", "qga:", ()),
        # the installer's network (allow-hotplug enp0s2) on a disk converted to VMDK, ufw on
        ("bios-installer.vmdk", "firmware: bios (detected: MBR partition table)", "qga:",
         ("-j ufw-before-input", _UFW_OPENED, "firewall: iptables: INPUT accepts 18765/tcp")),
        # nftables with an input policy of drop; the seed opens the port
        ("uefi-cloud", "firmware: uefi (detected:", "cloud-init: the agent was started",
         ("policy drop;", _NFT_OPENED)),
    ],
)
def test_a_distro_disk_boots_through_the_plugin(
    inner: pytest.Pytester,
    disks: Path,
    variant: str,
    firmware: str,
    delivery: str,
    firewall: tuple[str, ...],
) -> None:
    """``firewall``: what the firewall shows after the port was opened (the guest's
    ``nft list ruleset`` / ``iptables -S INPUT``, and the install's progress line);
    a guest without an active firewall must show no rule for the port."""
    disk = disks / (variant if "." in variant else f"{variant}.qcow2")
    terminal = variant in TERMINAL_VARIANTS
    if terminal:
        inner.makepyfile(test_scenario=SCENARIO + TERMINAL_SCENARIO)
    # A cloud-init first boot under TCG starts the agent 3 min in on a quiet host (its
    # stages start Python each time) and later on a loaded one: its boot gets the time a
    # user of such an image would give it. A boot that goes wrong still fails fast (the
    # login prompt with no channel, the guest's death).
    boot = ["--adare-boot-timeout=600"] if "cloud" in variant else []
    result = run_inner_pytest(
        inner,
        "-p", "no:cacheprovider", "-v", "-s", f"--adare-vm={disk}",
        "--adare-accel=auto", *boot, timeout=INNER_TIMEOUT,
    )  # fmt: skip
    output = result.stdout.str()
    result.assert_outcomes(passed=4 if terminal else 3)
    assert firmware in output and delivery in output
    rules = output.split("FIREWALL<<", 1)[1].split(">>FIREWALL", 1)[0]
    for shown in firewall:
        assert shown in (output if shown.startswith("firewall:") else rules), rules
    if not firewall:
        assert "18765" not in rules and "firewall: none active" in output
    assert "settle: systemd: running" in output or "settle: systemd: degraded" in output
    print(f"{variant}: ready in {_ready_seconds(output):.1f} s")


@pytest.mark.timeout(180)
def test_a_uefi_disk_forced_to_bios_fails_fast_naming_the_firmware(
    disks: Path, tmp_path: Path
) -> None:
    with pytest.raises(VMDied) as caught:
        with launch(disks / "uefi-qga.qcow2", workdir=tmp_path, firmware="bios", accel="tcg",
                    progress=None):  # fmt: skip
            pass
    message = str(caught.value)
    assert "SeaBIOS" in message and "(firmware: bios)" in message
    assert "console" in message.lower()
    firmware_log = (tmp_path / "firmware.log").read_text(errors="replace")
    assert "Booting from Hard Disk" in firmware_log


def test_a_cloud_image_with_cloud_init_disabled_names_both_missing_channels(
    disks: Path, tmp_path: Path
) -> None:
    with pytest.raises(AgentUnreachable) as caught:
        with launch(disks / "uefi-cloud-disabled.qcow2", workdir=tmp_path, accel="tcg",
                    progress=None):  # fmt: skip
            pass
    message = str(caught.value)
    assert message.startswith("no way to deliver the agent: qemu-ga did not answer")
    assert "cloud-init did not run (not installed, or disabled)" in message


def test_check_on_a_disk_without_python3_names_the_channel_and_the_missing_python(
    disks: Path,
) -> None:
    """``adare-image check`` boots a user's disk as the plugin does."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest_adare.image_cli", "check",
         str(disks / "bios-qga-nopython.qcow2"), "--accel", "tcg", "--timeout", "600"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    print(done.stdout)
    assert done.returncode == 1
    assert "(qcow2; the agent is delivered at run time)" in done.stdout
    assert "vm qga: qemu-ga answers" in done.stdout
    failed = done.stdout.splitlines()[-1]
    assert failed.startswith("FAILED: the guest has no python3 (")
    assert failed.endswith("the agent needs Python >= 3.9 in the image")


def test_the_disks_are_what_distributions_ship(disks: Path) -> None:
    """GPT + ESP for UEFI, MBR with boot code for BIOS, as ``sfdisk`` reads them."""

    def table(variant: str) -> str:
        raw = disks / f"{variant}.head.raw"
        subprocess.run(["qemu-img", "convert", "-O", "raw", str(disks / f"{variant}.qcow2"),
                        str(raw)], check=True)  # fmt: skip
        try:
            return subprocess.run(["sfdisk", "--dump", str(raw)], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
        finally:
            raw.unlink()

    uefi = table("uefi-qga")
    assert "label: gpt" in uefi and "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" in uefi
    bios = table("bios-qga")
    assert "label: dos" in bios and "bootable" in bios
