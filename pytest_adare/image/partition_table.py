"""Which firmware a bare disk needs, read from its partition table (a leaf, pure).

A disk whose table is GPT with an EFI system partition and no BIOS boot partition was
made for UEFI (most current cloud images are hybrid: they carry both and boot either
way); anything else (MBR, GPT with a BIOS boot partition, no table) is booted by BIOS.
The caller reads the disk's first :data:`HEAD_BYTES` (through ``qemu-img``, so any disk
format works) and hands them here::

    >>> firmware_for(b"\\0" * HEAD_BYTES)
    ('bios', 'no partition table')
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Literal

Firmware = Literal["bios", "uefi"]
FIRMWARES: tuple[Firmware, ...] = ("bios", "uefi")
SECTOR = 512
HEAD_BYTES = 34 * SECTOR
"""Protective MBR, GPT header and the standard 128 partition entries."""

ESP_TYPE = uuid.UUID("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
BIOS_BOOT_TYPE = uuid.UUID("21686148-6449-6E6F-744E-656564454649")
_MAX_ENTRIES = 128


@dataclass(frozen=True)
class PartitionTable:
    """The kind of table and the partition types it holds (GPT: UUIDs; MBR: type bytes)."""

    kind: Literal["gpt", "mbr", "none"]
    gpt_types: tuple[uuid.UUID, ...] = ()
    mbr_types: tuple[int, ...] = ()


def read_partition_table(head: bytes) -> PartitionTable:
    """Parse the table in a disk's first sectors; anything unreadable is ``none``.

    The bytes come from a guest image (untrusted): every offset and count is checked
    against what was read, nothing is trusted to be in range.
    """
    if len(head) < 2 * SECTOR or head[510:512] != b"\x55\xaa":
        return PartitionTable("none")
    mbr_types = tuple(
        head[446 + 16 * i + 4] for i in range(4) if head[446 + 16 * i + 4] != 0
    )
    header = head[SECTOR : 2 * SECTOR]
    if header[:8] != b"EFI PART":
        return PartitionTable("mbr" if mbr_types else "none", mbr_types=mbr_types)
    entries_lba, count, size = struct.unpack_from("<QII", header, 72)
    if size < 128 or count > _MAX_ENTRIES:
        return PartitionTable("gpt")
    types = []
    for index in range(count):
        start = entries_lba * SECTOR + index * size
        if start + 16 > len(head):
            break
        raw = head[start : start + 16]
        if any(raw):
            types.append(uuid.UUID(bytes_le=raw))
    return PartitionTable("gpt", gpt_types=tuple(types))


def firmware_for(head: bytes) -> tuple[Firmware, str]:
    """The firmware a disk with these first bytes needs, and why, in a few words."""
    table = read_partition_table(head)
    if table.kind == "gpt":
        has_esp, has_bios_boot = ESP_TYPE in table.gpt_types, BIOS_BOOT_TYPE in table.gpt_types
        if has_esp and not has_bios_boot:
            return "uefi", "GPT with an EFI system partition and no BIOS boot partition"
        if has_esp:
            return "bios", "GPT with both an EFI system and a BIOS boot partition"
        return "bios", "GPT without an EFI system partition"
    if table.kind == "mbr":
        return "bios", "MBR partition table"
    return "bios", "no partition table"
