"""What one WebSocket message costs the agent while it is parsed (issue 27, item 12).

A 60 MiB text frame of ASCII and one 4-byte character used to be held raw, unmasked
and as a 4-bytes-a-character ``str`` at once (7 times its size). Now the frame is
unmasked where it lies and decoded once; a text over the decoding limit (the agent's
16 MiB message limit: it is refused by size anyway) stays bytes. Measured with
tracemalloc, against the bounds docs/security.md states.
"""

from __future__ import annotations

import os
import struct
import tracemalloc

import pytest

from adare_guest.websocket.frames import DataMessage, FrameParser, Opcode, apply_mask

MiB = 1024 * 1024
READ_SIZE = 256 * 1024
"""What asyncio's socket transport reads at once."""
CONSTANT = 8 * MiB
"""The unmasking chunk's temporaries and the buffer's over-allocation, at most."""


def masked_frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    header = bytes([0x80 | opcode]) + struct.pack("!BQ", 0x80 | 127, len(payload))
    return header + mask + apply_mask(payload, mask)


def ascii_and_one_wide_character(size: int) -> bytes:
    return b"x" * (size - 4) + "\U0001f600".encode()


def parse_measured(parser: FrameParser, data: bytes) -> tuple[list[DataMessage], int]:
    """Feed ``data`` as socket reads would; the messages and the peak of new memory."""
    view = memoryview(data)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        events = []
        for start in range(0, len(view), READ_SIZE):
            events += parser.feed(view[start : start + READ_SIZE])
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert all(isinstance(event, DataMessage) for event in events)
    return events, peak  # type: ignore[return-value]


@pytest.mark.parametrize("opcode", [Opcode.TEXT, Opcode.BINARY], ids=["text", "binary"])
def test_a_60_mib_message_costs_at_most_twice_its_size(opcode: Opcode) -> None:
    size = 60 * MiB
    parser = FrameParser(max_message=64 * MiB, max_text=16 * MiB)
    (message,), peak = parse_measured(
        parser, masked_frame(opcode, ascii_and_one_wide_character(size))
    )
    # Over the decoding limit a text stays bytes (checked UTF-8): its receiver refuses it.
    assert isinstance(message.data, bytes) and len(message.data) == size
    assert message.data.endswith("\U0001f600".encode())
    assert peak <= 2 * size + CONSTANT, f"peak {peak / size:.2f} times the message"
    assert parser.buffered == 0


def test_a_text_up_to_the_decoding_limit_costs_at_most_six_times_its_size() -> None:
    size = 16 * MiB
    parser = FrameParser(max_message=64 * MiB, max_text=size)
    (message,), peak = parse_measured(
        parser, masked_frame(Opcode.TEXT, ascii_and_one_wide_character(size))
    )
    assert isinstance(message.data, str) and message.data.endswith("\U0001f600")
    # The bytes, and the str: 4 bytes a character, plus the 1-byte prefix CPython's
    # decoder widens when the wide character comes.
    assert peak <= 6 * size + CONSTANT, f"peak {peak / size:.2f} times the message"


def test_a_fragmented_text_is_checked_as_it_arrives_and_decoded_once() -> None:
    parser = FrameParser(max_message=64 * MiB, max_text=16 * MiB)
    text = "h\u00e9llo \U0001f600".encode()
    first = bytes([0x01, 0x80 | 5]) + b"\0\0\0\0" + text[:5]
    last = bytes([0x80, 0x80 | (len(text) - 5)]) + b"\0\0\0\0" + text[5:]
    assert parser.feed(first) == []
    assert parser.feed(last) == [DataMessage("h\u00e9llo \U0001f600")]
    bad = bytes([0x01, 0x81]) + b"\0\0\0\0" + b"\xff"
    with pytest.raises(Exception, match="not valid UTF-8"):
        parser.feed(bad)


def test_an_undecoded_text_that_is_not_utf8_still_closes_with_1007() -> None:
    parser = FrameParser(max_message=1024, max_text=16)
    payload = b"x" * 40 + b"\xc3"  # cut inside a character
    with pytest.raises(Exception, match="not valid UTF-8") as raised:
        parser.feed(masked_frame(Opcode.TEXT, payload))
    assert getattr(raised.value, "code", None) == 1007
