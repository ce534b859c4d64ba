"""Which firmware boots a disk, and how a firmware boot that cannot succeed is told apart.

The partition tables are written by ``sfdisk`` on real files and read back through
``qemu-img`` (also from qcow2 and vmdk), as the plugin reads a user's disk.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.partition_table import HEAD_BYTES, firmware_for, read_partition_table
from pytest_adare.image.resolve import bare_disk_manifest, disk_head, resolve_image
from pytest_adare.qemu.firmware import BootWatch, find_ovmf

ESP = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
BIOS_BOOT = "21686148-6449-6E6F-744E-656564454649"
LINUX = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"


def _disk(tmp_path: Path, table: str, name: str = "disk.raw", fmt: str = "raw") -> Path:
    raw = tmp_path / "disk.raw"
    with raw.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    if table:
        subprocess.run(
            ["sfdisk", "--no-reread", "--no-tell-kernel", "-q", str(raw)],
            input=table, text=True, check=True, capture_output=True,
        )  # fmt: skip
    if fmt == "raw":
        return raw
    out = tmp_path / name
    subprocess.run(["qemu-img", "convert", "-O", fmt, str(raw), str(out)], check=True)
    return out


UEFI_ONLY = f"label: gpt\nsize=20M, type={ESP}\ntype={LINUX}\n"
HYBRID = f"label: gpt\nsize=1M, type={BIOS_BOOT}\nsize=20M, type={ESP}\ntype={LINUX}\n"
GPT_PLAIN = f"label: gpt\ntype={LINUX}\n"
MBR = "label: dos\nsize=20M, type=c, bootable\ntype=83\n"


@pytest.mark.parametrize(
    ("table", "firmware", "why"),
    [
        (UEFI_ONLY, "uefi", "GPT with an EFI system partition and no BIOS boot partition"),
        (HYBRID, "bios", "GPT with both an EFI system and a BIOS boot partition"),
        (GPT_PLAIN, "bios", "GPT without an EFI system partition"),
        (MBR, "bios", "MBR partition table"),
        ("", "bios", "no partition table"),
    ],
)
def test_the_partition_table_decides_the_firmware(
    tmp_path: Path, table: str, firmware: str, why: str
) -> None:
    disk = _disk(tmp_path, table)
    assert firmware_for(disk_head(disk, "raw")) == (firmware, why)


@pytest.mark.parametrize("fmt", ["qcow2", "vmdk", "vdi", "vhdx", "vpc"])
def test_a_bare_disk_in_any_format_is_read_through_qemu_img(tmp_path: Path, fmt: str) -> None:
    disk = _disk(tmp_path, UEFI_ONLY, name=f"disk.{fmt}", fmt=fmt)
    manifest = bare_disk_manifest(disk)
    assert (manifest.format, manifest.firmware) == (fmt, "uefi")
    assert manifest.firmware_reason.startswith("detected: GPT with an EFI system partition")


def test_a_hostile_gpt_header_is_read_within_the_bytes_given() -> None:
    head = bytearray(HEAD_BYTES)
    head[510:512] = b"\x55\xaa"
    head[512:520] = b"EFI PART"
    # entries far beyond the bytes read, an absurd count and entry size
    head[512 + 72 : 512 + 88] = (10**12).to_bytes(8, "little") + (2**31).to_bytes(4, "little") + (
        2**31
    ).to_bytes(4, "little")
    assert read_partition_table(bytes(head)).kind == "gpt"
    assert firmware_for(bytes(head))[0] == "bios"
    head[512 + 72 : 512 + 88] = (10**12).to_bytes(8, "little") + (4).to_bytes(
        4, "little"
    ) + (128).to_bytes(4, "little")
    assert read_partition_table(bytes(head)).gpt_types == ()
    assert read_partition_table(b"\x55\xaa").kind == "none"


def test_missing_ovmf_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="install the package 'ovmf'"):
        find_ovmf(((str(tmp_path / "CODE.fd"), str(tmp_path / "VARS.fd")),))


def test_ovmf_is_found_at_the_debian_path() -> None:
    if not Path("/usr/share/OVMF/OVMF_CODE_4M.fd").is_file():
        pytest.skip("the ovmf package is not installed (scripts/setup installs it)")
    assert find_ovmf().code == Path("/usr/share/OVMF/OVMF_CODE_4M.fd")


def _watch(firmware: str = "bios") -> BootWatch:
    return BootWatch(firmware, silence_seconds=30.0, now=0.0)


def test_seabios_without_a_bootable_device_fails_at_once() -> None:
    verdict = _watch().verdict(
        console="", firmware_log="Booting from Hard Disk...\nNo bootable device.\n",
        screen=b"s", now=1.0,
    )  # fmt: skip
    assert verdict == "SeaBIOS found no bootable device (firmware: bios)"


def test_ovmf_without_a_boot_option_fails_at_once() -> None:
    console = "BdsDxe: No bootable option or device was found.\r\n"
    verdict = _watch("uefi").verdict(console=console, firmware_log="", screen=b"", now=1.0)
    assert verdict == "OVMF found no bootable option or device on the disk (firmware: uefi)"


def test_a_kernel_panic_fails_even_after_the_kernel_started() -> None:
    watch = _watch()
    started = "[0.0] Linux version 6.1\n"
    assert watch.verdict(console=started, firmware_log="", screen=b"", now=1) is None
    console = "[0.0] Linux version 6.1\n[2.1] Kernel panic - not syncing: VFS: Unable to mount\n"
    verdict = watch.verdict(console=console, firmware_log="", screen=b"", now=99)
    assert verdict is not None and "Kernel panic - not syncing: VFS: Unable to mount" in verdict


def test_silence_before_the_kernel_fails_after_the_bound_naming_what_seabios_did() -> None:
    watch = _watch()
    log = "Booting from Hard Disk...\nBooting from 0000:7c00\n"
    assert watch.verdict(console="", firmware_log=log, screen=b"a", now=1.0) is None
    assert watch.verdict(console="", firmware_log=log, screen=b"a", now=30.9) is None
    verdict = watch.verdict(console="", firmware_log=log, screen=b"a", now=31.0)
    assert verdict is not None
    assert verdict.startswith("SeaBIOS ran the disk's boot code and then nothing new")
    assert "--adare-firmware=uefi" in verdict and verdict.endswith("(firmware: bios)")


def test_any_change_on_the_screen_or_console_restarts_the_silence() -> None:
    watch = _watch("uefi")
    assert watch.verdict(console="", firmware_log="", screen=b"a", now=1.0) is None
    assert watch.verdict(console="", firmware_log="", screen=b"b", now=30.0) is None
    assert watch.verdict(console="x", firmware_log="", screen=b"b", now=59.0) is None
    assert watch.verdict(console="x", firmware_log="", screen=b"b", now=88.0) is None
    verdict = watch.verdict(console="x", firmware_log="", screen=b"b", now=89.5)
    assert verdict is not None and "no kernel started (firmware: uefi)" in verdict


def test_once_the_kernel_is_up_silence_is_normal() -> None:
    watch = _watch()
    console = "Welcome to Debian GNU/Linux 12 (bookworm)!\n"
    assert watch.verdict(console=console, firmware_log="", screen=b"", now=1.0) is None
    assert watch.verdict(console=console, firmware_log="", screen=b"", now=1000.0) is None


def test_a_blinking_cursor_is_no_progress() -> None:
    watch = _watch()
    for second in range(0, 31):
        screen = b"cursor on" if second % 2 else b"cursor off"
        assert watch.verdict(console="", firmware_log="", screen=screen, now=second) is None
    assert watch.verdict(console="", firmware_log="", screen=b"cursor on", now=31.5) is not None


@pytest.mark.parametrize("fmt", ["vmdk", "vdi", "vhdx", "vpc"])
def test_a_foreign_disk_is_converted_once_to_a_qcow2_that_holds_the_same_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """QEMU's vmdk/vdi/vhdx/vpc drivers block savevm: the disk QEMU backs its overlay
    with is a copy."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    disk = _disk(tmp_path, UEFI_ONLY, name=f"disk.{fmt}", fmt=fmt)
    lines: list[str] = []
    manifest = resolve_image(disk, progress=lines.append)
    assert (manifest.format, manifest.firmware) == ("qcow2", "uefi")
    assert manifest.disk.parent == tmp_path / "cache" / "pytest-adare" / "converted"
    compare = ["qemu-img", "compare", "-f", fmt, "-F", "qcow2", str(disk), str(manifest.disk)]
    assert subprocess.run(compare, capture_output=True, check=False).returncode == 0
    assert lines == [
        f"converting disk.{fmt} ({fmt}) to qcow2 once: QEMU's {fmt} driver blocks the "
        "snapshots that isolate tests"
    ]
    again = resolve_image(disk, progress=lines.append)
    assert again.disk == manifest.disk and len(lines) == 1
