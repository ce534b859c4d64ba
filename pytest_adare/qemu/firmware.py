"""The firmware that boots a disk, and telling a failed boot from a slow one.

``bios`` is QEMU's SeaBIOS; ``uefi`` is OVMF (Debian/Ubuntu package ``ovmf``, Fedora
``edk2-ovmf``), found at the distributions' standard paths; each VM writes its own qcow2
copy of the variables store (:func:`uefi_vars_copy`).

A firmware boot can fail in ways QEMU does not report: SeaBIOS finds no bootable
device, OVMF finds no boot option, SeaBIOS runs a UEFI-only disk's empty boot code, the
kernel panics. :class:`BootWatch` is fed what can be seen from the host (the serial
console, the firmware's debug log, a hash of the screen) and :meth:`BootWatch.verdict`
names the failure in one sentence, or returns None while the boot may still succeed::

    >>> watch = BootWatch("bios", silence_seconds=30.0, now=0.0)
    >>> watch.verdict(console="", firmware_log="No bootable device.", screen=b"", now=1.0)
    'SeaBIOS found no bootable device (firmware: bios)'
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from pytest_adare.errors import ImageError
from pytest_adare.qemu.qemu_img import qemu_img

OVMF_PAIRS: tuple[tuple[str, str], ...] = (
    ("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
    ("/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"),
    ("/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd"),
    ("/usr/share/edk2/x64/OVMF_CODE.4m.fd", "/usr/share/edk2/x64/OVMF_VARS.4m.fd"),
)
"""(code, variables) pairs tried in order: Debian/Ubuntu (4 MiB, then 2 MiB), Fedora, Arch."""

BOOT_SILENCE_SECONDS = 30.0
"""A firmware boot fails when nothing new shows on the console, the firmware log or the
screen for this long before the guest's kernel has printed anything on the console."""

# The guest's kernel has taken over: from here on the boot is the OS's business.
_OS_STARTED = re.compile(r"Linux version|Run /init|systemd\[1\]|Welcome to|login:")
_PANIC = re.compile(r"Kernel panic - not syncing[^\n]*")
_SEABIOS_NOTHING = re.compile(r"No bootable device")
_OVMF_NOTHING = re.compile(r"No bootable option or device was found")
_SEABIOS_HANDOFF = re.compile(r"Booting from (?:Hard Disk|0000:7c00)")


@dataclass(frozen=True)
class UefiFirmware:
    """OVMF's code and the variables template every VM copies."""

    code: Path
    vars_template: Path


def find_ovmf(pairs: tuple[tuple[str, str], ...] = OVMF_PAIRS) -> UefiFirmware:
    """The first installed OVMF code + variables pair.

    :raise ImageError: none is installed (the message names the package).
    """
    for code, template in pairs:
        if Path(code).is_file() and Path(template).is_file():
            return UefiFirmware(Path(code), Path(template))
    raise ImageError(
        "this disk boots with UEFI, but no OVMF firmware is installed (looked for "
        f"{', '.join(code for code, _ in pairs)}): install the package 'ovmf' "
        "(Debian/Ubuntu; 'edk2-ovmf' on Fedora), or boot it with --adare-firmware=bios"
    )


def uefi_vars_copy(firmware: UefiFirmware, out: Path) -> Path:
    """A fresh qcow2 copy of the variables store at ``out`` (qcow2: ``savevm`` needs every
    writable drive to take snapshots).

    :raise VMLaunchError: ``qemu-img`` failed.
    """
    out.unlink(missing_ok=True)
    qemu_img(
        "convert", "-q", "-f", "raw", "-O", "qcow2", str(firmware.vars_template), str(out),
        what="copy the UEFI variables store",
    )
    return out


def firmware_name(firmware: str) -> str:
    """``SeaBIOS`` / ``OVMF`` for ``bios`` / ``uefi``."""
    return "OVMF" if firmware == "uefi" else "SeaBIOS"


class BootWatch:
    """Decides, from what the host sees, whether a firmware boot has failed (sans I/O).

    Feed it the whole console text and firmware log so far and a digest of the screen;
    it remembers when any of them last changed. Until the guest's kernel shows up on
    the console, ``silence_seconds`` without any change is a failure; a kernel panic is
    a failure at any time.
    """

    def __init__(self, firmware: str, *, silence_seconds: float, now: float) -> None:
        self.firmware = firmware
        self.silence_seconds = silence_seconds
        self.os_started = False
        self._seen: tuple[int, int] = (0, 0)
        # A blinking text cursor flips the screen between two images: only a screen
        # not among the last few counts as new.
        self._screens: deque[bytes] = deque(maxlen=4)
        self._changed_at = now

    def verdict(
        self,
        *,
        console: str,
        firmware_log: str,
        screen: bytes,
        now: float,
        console_size: int | None = None,
    ) -> str | None:
        """The failure in one sentence, or None while the boot may still succeed.

        ``console`` may be the console's tail; ``console_size`` (its whole length, by
        default ``len(console)``) tells whether anything new arrived.
        """
        where = f"(firmware: {self.firmware})"
        panic = _PANIC.search(console)
        if panic:
            return f"the guest's kernel panicked: {panic.group(0).strip()} {where}"
        if _SEABIOS_NOTHING.search(firmware_log) or _SEABIOS_NOTHING.search(console):
            return f"SeaBIOS found no bootable device {where}"
        if _OVMF_NOTHING.search(console):
            return f"OVMF found no bootable option or device on the disk {where}"
        if self.os_started or _OS_STARTED.search(console):
            self.os_started = True
            return None
        seen = (len(console) if console_size is None else console_size, len(firmware_log))
        new_screen = screen not in self._screens
        if new_screen:
            self._screens.append(screen)
        if seen != self._seen or new_screen:
            self._seen, self._changed_at = seen, now
            return None
        if now - self._changed_at < self.silence_seconds:
            return None
        quiet = (
            "nothing new on the console, the firmware log or the screen for "
            f"{self.silence_seconds:.0f} s"
        )
        if self.firmware == "bios" and _SEABIOS_HANDOFF.search(firmware_log):
            return (
                f"SeaBIOS ran the disk's boot code and then {quiet}: the disk has no BIOS "
                f"boot loader (a UEFI-only disk? try --adare-firmware=uefi) {where}"
            )
        return f"the boot made no progress: {quiet}, and no kernel started {where}"
