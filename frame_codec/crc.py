"""CRC-16/CCITT-FALSE: polynomial 0x1021, initial value 0xFFFF, no reflection, no final XOR."""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import Union

BytesLike = Union[bytes, bytearray, memoryview]  # evaluated at run time: no ``|`` on 3.9
"""What the codec accepts wherever it takes bytes."""

Checksum = Callable[[BytesLike], int]
"""A 16-bit checksum function; the codec takes one so a benchmark can swap it."""


def crc16_ccitt_false(data: BytesLike) -> int:
    """CRC-16/CCITT-FALSE of ``data``, computed in C by :func:`binascii.crc_hqx`.

    >>> hex(crc16_ccitt_false(b"123456789"))
    '0x29b1'
    """
    return binascii.crc_hqx(data, 0xFFFF)
