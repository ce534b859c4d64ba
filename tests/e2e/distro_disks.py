"""Debian 12 disks built the way distributions build theirs: test inputs, not a product.

The end-to-end tests of "bring your own image" boot these. They are built by this file
alone, with the tools a distribution's image builder uses, and share no code with
``adare-image`` (which would hide the differences they exist to show):

- one ``mmdebstrap`` run (systemd as PID 1, Debian's kernel and initramfs, python3,
  qemu-guest-agent, cloud-init, ifupdown) packed as a tarball shared by every variant;
- per root file system: the tarball unpacked, changed in a ``chroot`` (packages purged,
  services enabled), then ``mkfs.ext4 -d`` into a file: no loop device, no mount;
- the boot partition is a FAT file system written with ``mkfs.vfat -C`` and mtools:
  systemd-boot as ``EFI/BOOT/BOOTX64.EFI`` for UEFI (GPT + EFI system partition),
  SYSLINUX (``syslinux --install`` works on an image file through mtools) behind
  SYSLINUX's MBR code for BIOS (MBR, active FAT partition); the kernel and initrd sit
  on that partition;
- the partitions are copied into a sparse file partitioned with ``sfdisk``, then
  converted to qcow2.

Variants (``VARIANTS``; the file name is ``<variant>.qcow2``):

``uefi-qga``
    GPT + ESP, systemd, systemd-networkd DHCP, qemu-guest-agent, no cloud-init.
``uefi-cloud``
    GPT + ESP, systemd, cloud-init (NoCloud finds a ``cidata`` volume), no QGA and no
    network configuration of its own (like Debian's genericcloud images); nftables
    enabled with an input policy of drop (only ssh and DHCP replies let in).
``bios-qga``
    MBR + SYSLINUX, otherwise the root file system of ``uefi-qga``.
``bios-installer``
    MBR, the network as the Debian installer writes it: ifupdown with
    ``allow-hotplug enp0s2`` / ``iface enp0s2 inet dhcp``; qemu-guest-agent; ufw
    enabled (its default: incoming denied), as on an Ubuntu desktop.
``uefi-cloud-disabled``
    ``uefi-cloud`` with ``/etc/cloud/cloud-init.disabled``: no channel at all.
``bios-qga-nopython``
    ``bios-qga`` without python3.
``bios-installer.vmdk``, ``uefi-qga.vdi``, ``bios-qga.vhdx``, ``bios-qga.vpc``
    ``bios-installer`` converted to VMDK (VMware), ``uefi-qga`` to VDI (VirtualBox),
    ``bios-qga`` to VHDX (Hyper-V) and VPC (Virtual PC / Azure's VHD): the tests boot
    these forms of them.

Every disk has the root password ``adare`` and a serial getty on ``ttyS0``
(``console=ttyS0``). Needs root (mmdebstrap ``--mode=root`` and ``chroot``), network
access to the Debian mirror, and: mmdebstrap, e2fsprogs, dosfstools, mtools, fdisk,
syslinux, syslinux-common, qemu-utils (``scripts/setup`` installs them).

Built once and cached under ``<pytest-adare cache>/distro-disks/<hash of this file>``
(the mmdebstrap tarball beside it, keyed by the package list)::

    python tests/e2e/distro_disks.py            # build (or find) them; prints the dir
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from pytest_adare.cache_dir import cache_root, exclusive_lock

MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
ROOT_UUID = "6a3b2f1e-0c4d-4e5f-8a9b-0c1d2e3f4a5b"
ROOT_PASSWORD = "adare"
KERNEL_CMDLINE = f"root=UUID={ROOT_UUID} ro console=tty0 console=ttyS0,115200"
VARIANTS = (
    "uefi-qga",
    "uefi-cloud",
    "bios-qga",
    "bios-installer",
    "uefi-cloud-disabled",
    "bios-qga-nopython",
)
PACKAGES = (
    "systemd-sysv",
    "udev",
    "dbus",
    "linux-image-amd64",
    "zstd",
    "e2fsprogs",
    "python3",
    "qemu-guest-agent",
    "cloud-init",
    "ifupdown",
    "isc-dhcp-client",
    "iproute2",
    "systemd-boot-efi",
    "nftables",
    "ufw",
)
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
ESP_MIB = 160
ROOT_MIB = 1800
_SECTOR = 512
_FIRST_LBA = 2048
_ESP_TYPE = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
_LINUX_TYPE = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
_NETWORKD_DHCP = "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"
_NFTABLES_DROP = (
    "#!/usr/sbin/nft -f\n\nflush ruleset\n\n"
    "table inet filter {\n"
    "\tchain input {\n"
    "\t\ttype filter hook input priority filter; policy drop;\n"
    "\t\tct state established,related accept\n"
    "\t\tiif lo accept\n"
    "\t\tmeta l4proto { icmp, ipv6-icmp } accept\n"
    "\t\tudp dport 68 accept\n"
    "\t\ttcp dport 22 accept\n"
    "\t}\n"
    "}\n"
)
_INSTALLER_INTERFACES = (
    "source /etc/network/interfaces.d/*\n\n"
    "auto lo\niface lo inet loopback\n\n"
    "# The primary network interface\n"
    "allow-hotplug enp0s2\niface enp0s2 inet dhcp\n"
)

Log = Callable[[str], None]


def build_key() -> str:
    """Hash of this file: any change here builds the disks again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def disks_dir() -> Path:
    """Where the disks of this version of the script live."""
    return cache_root() / "distro-disks" / build_key()


def distro_disks(log: Log = print) -> Path:
    """The directory holding every variant's disk, built on first use (≈ 5 min)."""
    out = disks_dir()
    done = out / "DONE"
    if done.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out.parent / ".lock", timeout=3600, what="the distro test disks"):
        if done.exists():
            return out
        for old in out.parent.iterdir():  # disks of other versions of this file
            if old.is_dir() and old.name != out.name:
                shutil.rmtree(old)
        out.mkdir()
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="distro-disks-", dir=out.parent) as tmp:
            _build_all(Path(tmp), out, log)
        done.write_text(f"{time.monotonic() - started:.0f} s\n")
    return out


def _run(argv: Iterable[str], log: Log, **kwargs: object) -> None:
    argv = list(argv)
    started = time.monotonic()
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL
    result = subprocess.run(
        argv, capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}"
            f"\n{result.stderr[-3000:]}"
        )
    if time.monotonic() - started > 5:
        log(f"distro disks: {argv[0]} took {time.monotonic() - started:.0f} s")


def _chroot(root: Path, script: str, log: Log) -> None:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    _run(["chroot", str(root), "sh", "-euxc", script], log, env=env)


def _base_tarball(log: Log) -> Path:
    """The mmdebstrap tarball, kept beside the disks (keyed by what goes into it) so a
    change to the disk layout does not download the packages again."""
    common = (
        f"echo root:{ROOT_PASSWORD} | chroot \"$1\" chpasswd; "
        'echo distro > "$1/etc/hostname"; '
        f'echo "UUID={ROOT_UUID} / ext4 errors=remount-ro 0 1" > "$1/etc/fstab"; '
        'rm -f "$1/etc/machine-id"; touch "$1/etc/machine-id"'
    )
    key = hashlib.sha256(repr((SUITE, MIRROR, PACKAGES, _DPKG_EXCLUDES, common)).encode())
    tarball = disks_dir().parent / f"base-{key.hexdigest()[:16]}.tar"
    if tarball.exists():
        return tarball
    for old in disks_dir().parent.glob("base-*.tar"):
        old.unlink()
    partial = tarball.with_suffix(".part.tar")
    _run(
        [
            "mmdebstrap",
            "--variant=apt",
            "--mode=root",
            "--include=" + ",".join(PACKAGES),
            '--aptopt=Acquire::Retries "3"',
            *(f"--dpkgopt={rule}" for rule in _DPKG_EXCLUDES),
            f"--customize-hook={common}",
            SUITE,
            str(partial),
            MIRROR,
        ],
        log,
    )
    partial.replace(tarball)
    return tarball


def _unpack(tarball: Path, root: Path, log: Log) -> None:
    root.mkdir()
    _run(["tar", "--xattrs", "--xattrs-include=*", "-xpf", str(tarball), "-C", str(root)], log)


def _systemd_qga(root: Path, log: Log) -> None:
    (root / "etc/systemd/network/80-dhcp.network").write_text(_NETWORKD_DHCP)
    _chroot(root, "dpkg --purge cloud-init ifupdown; systemctl enable systemd-networkd", log)


def _cloud(root: Path, log: Log) -> None:
    (root / "etc/nftables.conf").write_text(_NFTABLES_DROP)
    _chroot(root, "dpkg --purge qemu-guest-agent ifupdown; systemctl enable systemd-networkd; "
            "systemctl enable nftables", log)  # fmt: skip


def _installer(root: Path, log: Log) -> None:
    # What `ufw enable` persists, without loading rules into the build host's firewall.
    _chroot(root, "dpkg --purge cloud-init; systemctl enable ufw; "
            "sed -i 's/^ENABLED=no/ENABLED=yes/' /etc/ufw/ufw.conf; "
            "grep -qx 'ENABLED=yes' /etc/ufw/ufw.conf", log)  # fmt: skip
    (root / "etc/network/interfaces").write_text(_INSTALLER_INTERFACES)


def _root_fs(root: Path, image: Path, log: Log) -> None:
    _run(
        ["mkfs.ext4", "-q", "-F", "-L", "root", "-U", ROOT_UUID, "-d", str(root), str(image),
         f"{ROOT_MIB}M"],
        log,
    )  # fmt: skip


def _debugfs(image: Path, requests: str, log: Log) -> None:
    _run(["debugfs", "-w", "-f", "-", str(image)], log, input=requests)


def _boot_files(root: Path, boot: Path) -> None:
    boot.mkdir()
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    initrds = sorted((root / "boot").glob("initrd.img-*"))
    if len(kernels) != 1 or len(initrds) != 1:
        raise RuntimeError(f"expected one kernel and one initrd, found {kernels} {initrds}")
    shutil.copy(kernels[0], boot / "vmlinuz")
    shutil.copy(initrds[0], boot / "initrd.img")
    shutil.copy(root / "usr/lib/systemd/boot/efi/systemd-bootx64.efi", boot / "BOOTX64.EFI")


def _fat(image: Path, log: Log, *, label: str) -> None:
    _run(["mkfs.vfat", "-F", "32", "-n", label, "-h", str(_FIRST_LBA), "-C", str(image),
          str(ESP_MIB * 1024)], log)  # fmt: skip


def _mcopy(image: Path, files: dict[str, Path | str], work: Path, log: Log) -> None:
    for target, source in files.items():
        if isinstance(source, str):
            text = work / "mcopy.txt"
            text.write_text(source)
            source = text
        _run(["mcopy", "-o", "-i", str(image), str(source), f"::{target}"], log)


def _esp(boot: Path, image: Path, work: Path, log: Log) -> None:
    _fat(image, log, label="ESP")
    for directory in ("EFI", "EFI/BOOT", "loader", "loader/entries"):
        _run(["mmd", "-i", str(image), f"::{directory}"], log)
    entry = f"title Debian\nlinux /vmlinuz\ninitrd /initrd.img\noptions {KERNEL_CMDLINE}\n"
    _mcopy(
        image,
        {
            "EFI/BOOT/BOOTX64.EFI": boot / "BOOTX64.EFI",
            "vmlinuz": boot / "vmlinuz",
            "initrd.img": boot / "initrd.img",
            "loader/loader.conf": "default debian.conf\ntimeout 0\n",
            "loader/entries/debian.conf": entry,
        },
        work,
        log,
    )


def _syslinux_boot(boot: Path, image: Path, work: Path, log: Log) -> None:
    _fat(image, log, label="BOOT")
    # The FAT's hidden-sectors field (mkfs.vfat -h) tells the boot sector where it sits.
    _run(["syslinux", "--install", str(image)], log)
    config = (
        "DEFAULT debian\nPROMPT 0\nTIMEOUT 0\nLABEL debian\n  LINUX /vmlinuz\n"
        f"  INITRD /initrd.img\n  APPEND {KERNEL_CMDLINE}\n"
    )
    _mcopy(
        image,
        {"vmlinuz": boot / "vmlinuz", "initrd.img": boot / "initrd.img", "syslinux.cfg": config},
        work,
        log,
    )


def _disk(boot_fs: Path, root_fs: Path, out: Path, *, uefi: bool, work: Path, log: Log) -> None:
    raw = work / f"{out.stem}.raw"
    boot_sectors = boot_fs.stat().st_size // _SECTOR
    root_start = _FIRST_LBA + boot_sectors
    root_sectors = root_fs.stat().st_size // _SECTOR
    total = (root_start + root_sectors + _FIRST_LBA) * _SECTOR
    raw.unlink(missing_ok=True)
    with raw.open("wb") as handle:
        handle.truncate(total)
    if uefi:
        table = (
            "label: gpt\n"
            f"start={_FIRST_LBA}, size={boot_sectors}, type={_ESP_TYPE}, name=\"EFI System\"\n"
            f"start={root_start}, size={root_sectors}, type={_LINUX_TYPE}, name=\"root\"\n"
        )
    else:
        table = (
            "label: dos\n"
            f"start={_FIRST_LBA}, size={boot_sectors}, type=c, bootable\n"
            f"start={root_start}, size={root_sectors}, type=83\n"
        )
    _run(["sfdisk", "--no-reread", "--no-tell-kernel", str(raw)], log, input=table)
    if not uefi:
        _run(["dd", "if=/usr/lib/syslinux/mbr/mbr.bin", f"of={raw}", "bs=440", "count=1",
              "conv=notrunc"], log)  # fmt: skip
    for part, start in ((boot_fs, _FIRST_LBA), (root_fs, root_start)):
        _run(["dd", f"if={part}", f"of={raw}", "bs=4M", "conv=notrunc,sparse",
              "oflag=seek_bytes", f"seek={start * _SECTOR}"], log)  # fmt: skip
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(out)], log)
    raw.unlink()


def _build_all(work: Path, out: Path, log: Log) -> None:
    log("distro disks: mmdebstrap (one base for every variant)")
    tarball = _base_tarball(log)
    roots: dict[str, Path] = {}
    for name, change in (("qga", _systemd_qga), ("cloud", _cloud), ("installer", _installer)):
        tree = work / f"tree-{name}"
        _unpack(tarball, tree, log)
        change(tree, log)
        if name == "qga":
            _boot_files(tree, work / "boot")
        roots[name] = work / f"root-{name}.ext4"
        _root_fs(tree, roots[name], log)
        shutil.rmtree(tree)
    boot = work / "boot"
    esp, syslinux = work / "esp.fat", work / "syslinux.fat"
    _esp(boot, esp, work, log)
    _syslinux_boot(boot, syslinux, work, log)

    roots["cloud-disabled"] = work / "root-cloud-disabled.ext4"
    shutil.copy(roots["cloud"], roots["cloud-disabled"])
    _debugfs(roots["cloud-disabled"], "cd /etc/cloud\nwrite /dev/null cloud-init.disabled\n", log)
    roots["nopython"] = work / "root-nopython.ext4"
    shutil.copy(roots["qga"], roots["nopython"])
    _debugfs(roots["nopython"], "rm /usr/bin/python3\nrm /usr/bin/python3.11\n", log)

    layout = {
        "uefi-qga": (esp, "qga"),
        "uefi-cloud": (esp, "cloud"),
        "bios-qga": (syslinux, "qga"),
        "bios-installer": (syslinux, "installer"),
        "uefi-cloud-disabled": (esp, "cloud-disabled"),
        "bios-qga-nopython": (syslinux, "nopython"),
    }
    for variant, (boot_fs, root) in layout.items():
        log(f"distro disks: {variant}")
        _disk(boot_fs, roots[root], out / f"{variant}.qcow2", uefi=boot_fs == esp, work=work,
              log=log)  # fmt: skip
    exports = (
        ("bios-installer", "vmdk"), ("uefi-qga", "vdi"), ("bios-qga", "vhdx"), ("bios-qga", "vpc"),
    )  # fmt: skip
    for variant, fmt in exports:
        _run(["qemu-img", "convert", "-O", fmt, str(out / f"{variant}.qcow2"),
              str(out / f"{variant}.{fmt}")], log)  # fmt: skip


def main() -> int:
    """Build (or find) the disks and print their directory."""
    if os.geteuid() != 0:
        print("distro_disks: needs root (mmdebstrap --mode=root, chroot)", file=sys.stderr)
        return 2
    print(distro_disks())
    return 0


if __name__ == "__main__":
    sys.exit(main())
