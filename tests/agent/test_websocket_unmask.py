"""Unmasking client frames a chunk at a time: every byte equals the plain XOR, at the
sizes where chunking goes wrong (a chunk's edges, a partial last chunk, an unaligned
start in the parser's buffer)."""

from __future__ import annotations

import os
import struct

import pytest

from adare_guest.websocket.frames import _UNMASK_CHUNK, DataMessage, FrameParser, apply_mask

SIZES = [0, 1, 3, _UNMASK_CHUNK - 1, _UNMASK_CHUNK, _UNMASK_CHUNK + 1, 3 * _UNMASK_CHUNK + 2]


def plain_xor(data: bytes, mask: bytes) -> bytes:
    return bytes(b ^ mask[i % 4] for i, b in enumerate(data))


@pytest.mark.parametrize("size", SIZES)
def test_apply_mask_is_the_repeated_xor(size: int) -> None:
    data, mask = os.urandom(size), os.urandom(4)
    assert apply_mask(data, mask) == plain_xor(data, mask)


@pytest.mark.parametrize("size", [_UNMASK_CHUNK + 1, 3 * _UNMASK_CHUNK + 2])
def test_parser_unmasks_a_big_binary_frame_after_a_small_one(size: int) -> None:
    payload, mask = os.urandom(size), os.urandom(4)
    small = bytes([0x82, 0x83]) + mask + apply_mask(b"abc", mask)  # shifts the next start
    big = bytes([0x82, 0xFF]) + struct.pack("!Q", size) + mask + apply_mask(payload, mask)
    parser = FrameParser(max_message=size + 10, max_text=1024)
    messages = parser.feed(small + big)
    assert [m.data for m in messages if isinstance(m, DataMessage)] == [b"abc", payload]
