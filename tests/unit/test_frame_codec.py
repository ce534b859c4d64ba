"""Property tests of the DV frame codec (DESIGN §4)."""

from __future__ import annotations

import doctest
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import frame_codec
from frame_codec import (
    MAX_REQUEST_PAYLOAD,
    MAX_RESPONSE_PAYLOAD,
    DecodeEvent,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    Kind,
    MalformedFrame,
    PartialFrame,
    crc16_ccitt_false,
    decode_frame,
    encode_frame,
)
from frame_codec import codec as codec_module
from frame_codec import crc as crc_module
from frame_codec import decoder as decoder_module

# Property tests run without hypothesis deadlines: the shared machine may be busy.
LIMIT = {Kind.REQUEST: MAX_REQUEST_PAYLOAD, Kind.RESPONSE: MAX_RESPONSE_PAYLOAD}
NO_D = st.binary(max_size=200).map(lambda b: b.replace(b"D", b"d"))
"""Noise that cannot contain the start of a magic, so no frame can hide in it."""


def reference_crc(data: bytes) -> int:
    """CRC-16/CCITT-FALSE, bit by bit, straight from its definition."""
    value = 0xFFFF
    for byte in data:
        value ^= byte << 8
        for _ in range(8):
            value = ((value << 1) ^ 0x1021) if value & 0x8000 else value << 1
            value &= 0xFFFF
    return value


def frames_strategy(max_size: int = 64) -> st.SearchStrategy[Frame]:
    return st.builds(Frame, st.sampled_from(Kind), st.binary(max_size=max_size))


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[DecodeEvent]:
    events: list[DecodeEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def comparable(events: list[DecodeEvent]) -> list[object]:
    return [e if isinstance(e, Frame) else (type(e), str(e)) for e in events]


def only_frames(events: list[DecodeEvent]) -> list[Frame]:
    return [e for e in events if isinstance(e, Frame)]


# --- known vectors -------------------------------------------------------------------------


def test_crc_check_value_of_123456789_is_0x29b1() -> None:
    assert crc16_ccitt_false(b"123456789") == 0x29B1
    assert crc16_ccitt_false(b"") == 0xFFFF


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_crc_matches_the_bitwise_definition_and_the_crc_package(data: bytes) -> None:
    import crc

    # CRC-16/IBM-3740 is the catalogue name of CRC-16/CCITT-FALSE.
    calculator = crc.Calculator(crc.Crc16.IBM_3740.value)
    assert crc16_ccitt_false(data) == reference_crc(data) == calculator.checksum(data)


def test_hand_computed_request_frame() -> None:
    body = bytes([1, 1, 0, 2]) + b"hi"
    expected = b"DV" + body + reference_crc(body).to_bytes(2, "big")
    assert encode_frame(Kind.REQUEST, b"hi") == expected == bytes.fromhex("4456010100026869f08d")
    assert decode_frame(expected) == Frame(Kind.REQUEST, b"hi")


def test_hand_computed_empty_response_frame() -> None:
    body = bytes([1, 2, 0, 0])
    assert encode_frame(Kind.RESPONSE, b"") == b"DV" + body + reference_crc(body).to_bytes(2, "big")


def test_docstring_examples_hold() -> None:
    for module in (frame_codec, codec_module, crc_module, decoder_module):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__


# --- encode / decode_frame ------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(Kind))
def test_round_trip_for_every_payload_length_up_to_the_limit(kind: Kind) -> None:
    rng = random.Random(kind)
    for length in range(LIMIT[kind] + 1):
        payload = rng.randbytes(length)
        wire = encode_frame(kind, payload)
        assert len(wire) == length + 8
        assert decode_frame(wire) == Frame(kind, payload)


@settings(deadline=None)
@given(frames_strategy(MAX_REQUEST_PAYLOAD).filter(lambda f: len(f.payload) <= LIMIT[f.kind]))
def test_round_trip_of_arbitrary_payloads(frame: Frame) -> None:
    assert decode_frame(encode_frame(frame.kind, frame.payload)) == frame


@pytest.mark.parametrize("kind", list(Kind))
def test_encode_refuses_a_payload_one_byte_over_the_limit(kind: Kind) -> None:
    with pytest.raises(FrameTooLarge) as caught:
        encode_frame(kind, bytes(LIMIT[kind] + 1))
    assert (caught.value.length, caught.value.limit) == (LIMIT[kind] + 1, LIMIT[kind])


@pytest.mark.parametrize("kind", [0, 3, 255])
def test_encode_refuses_an_unknown_kind(kind: int) -> None:
    with pytest.raises(MalformedFrame, match="unknown frame kind"):
        encode_frame(kind, b"x")


@settings(max_examples=40, deadline=None)
@given(frames_strategy(32))
def test_every_single_bit_corruption_is_detected(frame: Frame) -> None:
    wire = encode_frame(frame.kind, frame.payload)
    for bit in range(len(wire) * 8):
        corrupted = bytearray(wire)
        corrupted[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(FrameError):
            decode_frame(bytes(corrupted))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(Kind), NO_D.filter(lambda b: len(b) <= 32))
def test_decoder_reports_every_single_bit_corruption_outside_the_length(
    kind: Kind, payload: bytes
) -> None:
    wire = encode_frame(kind, payload)
    length_bits = range(4 * 8, 6 * 8)
    for bit in range(len(wire) * 8):
        if bit in length_bits:
            continue
        corrupted = bytearray(wire)
        corrupted[bit // 8] ^= 1 << (bit % 8)
        events = FrameDecoder().feed(bytes(corrupted))
        assert events and not only_frames(events), bit
        assert all(isinstance(e, MalformedFrame) for e in events)


@settings(deadline=None)
@given(frames_strategy())
def test_truncation_at_every_offset_is_a_partial_frame(frame: Frame) -> None:
    wire = encode_frame(frame.kind, frame.payload)
    for cut in range(len(wire)):
        with pytest.raises(PartialFrame) as caught:
            decode_frame(wire[:cut])
        assert caught.value.received == cut
        assert caught.value.expected == (len(wire) if cut >= 6 else None)
        decoder = FrameDecoder()
        assert decoder.feed(wire[:cut]) == []
        assert decoder.pending is (cut > 0)
        partial = decoder.abandon()
        assert (partial.received if partial else 0) == cut
        assert not decoder.pending


@settings(deadline=None)
@given(frames_strategy(), st.binary(min_size=1, max_size=20))
def test_trailing_bytes_make_a_malformed_frame(frame: Frame, trailing: bytes) -> None:
    with pytest.raises(MalformedFrame, match="unexpected bytes after"):
        decode_frame(encode_frame(frame.kind, frame.payload) + trailing)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"XV\x01\x01\x00\x00\x00\x00", "bad magic"),
        (b"DV\x02\x01\x00\x00\x00\x00", "unsupported frame version 2"),
        (b"DV\x01\x07\x00\x00\x00\x00", "unknown frame kind 7"),
        (b"DV\x01\x01\x00\x00\x00\x00", "checksum mismatch"),
    ],
)
def test_bad_fields_are_malformed_frames(wire: bytes, message: str) -> None:
    with pytest.raises(MalformedFrame, match=message):
        decode_frame(wire)


# --- over-limit headers ---------------------------------------------------------------------


@settings(deadline=None)
@given(st.sampled_from(Kind), st.data())
def test_over_limit_header_is_rejected_as_soon_as_the_header_is_seen(
    kind: Kind, data: st.DataObject
) -> None:
    length = data.draw(st.integers(LIMIT[kind] + 1, 0xFFFF))
    header = b"DV" + bytes([1, kind]) + length.to_bytes(2, "big")
    with pytest.raises(FrameTooLarge):
        decode_frame(header)
    decoder = FrameDecoder()
    for byte in header[:-1]:
        assert decoder.feed(bytes([byte])) == []
    events = decoder.feed(header[-1:])
    assert len(events) == 1 and isinstance(events[0], FrameTooLarge)
    assert (events[0].length, events[0].limit) == (length, LIMIT[kind])
    assert decoder.buffered < 6
    # The next good frame goes through at once: nothing of the announced length was awaited.
    assert only_frames(decoder.feed(encode_frame(kind, b"ok"))) == [Frame(kind, b"ok")]


def test_decoder_limits_are_configurable_and_validated() -> None:
    decoder = FrameDecoder(max_request_payload=10)
    events = decoder.feed(encode_frame(Kind.REQUEST, bytes(11)))
    assert isinstance(events[0], FrameTooLarge)
    with pytest.raises(ValueError, match="payload limit"):
        FrameDecoder(max_response_payload=70000)


# --- incremental decoding -------------------------------------------------------------------


@settings(deadline=None)
@given(st.lists(st.tuples(NO_D, frames_strategy()), max_size=8), NO_D)
def test_decoder_resynchronises_after_noise(
    pieces: list[tuple[bytes, Frame]], tail_noise: bytes
) -> None:
    stream = b"".join(n + encode_frame(f.kind, f.payload) for n, f in pieces) + tail_noise
    events = FrameDecoder().feed(stream)
    assert only_frames(events) == [f for _, f in pieces]
    noise_runs = sum(1 for n, _ in pieces if n) + (1 if tail_noise else 0)
    errors = [e for e in events if not isinstance(e, Frame)]
    assert len(errors) == noise_runs
    assert all("noise" in str(e) for e in errors)


@settings(deadline=None)
@given(st.binary(max_size=3000), st.lists(frames_strategy(), min_size=1, max_size=5))
def test_good_frames_survive_arbitrary_noise_in_front(noise: bytes, frames: list[Frame]) -> None:
    # Noise may hold fake headers that swallow what follows; padding completes them so the
    # decoder rescans their bodies and finds the real frames again.
    padding = bytes(MAX_REQUEST_PAYLOAD + 8)
    stream = noise + b"".join(encode_frame(f.kind, f.payload) for f in frames) + padding
    found = iter(only_frames(FrameDecoder().feed(stream)))
    assert all(frame in found for frame in frames)  # an in-order subsequence


def stream_strategy() -> st.SearchStrategy[bytes]:
    part = st.one_of(
        frames_strategy().map(lambda f: encode_frame(f.kind, f.payload)),
        st.binary(max_size=40),
        st.just(b"DV\x01\x01\x7f\xff"),
        frames_strategy().map(lambda f: encode_frame(f.kind, f.payload)[:-1] + b"\x00"),
    )
    return st.lists(part, max_size=10).map(b"".join)


@settings(deadline=None)
@given(stream_strategy(), st.data())
def test_any_split_of_the_stream_gives_the_same_events(stream: bytes, data: st.DataObject) -> None:
    whole = comparable(FrameDecoder().feed(stream))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert comparable(feed_all(FrameDecoder(), chunks)) == whole
    one_by_one = [stream[i : i + 1] for i in range(len(stream))]
    assert comparable(feed_all(FrameDecoder(), one_by_one)) == whole


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=9000), max_size=6))
def test_memory_stays_bounded_under_a_garbage_stream(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    largest_frame = 8 + MAX_REQUEST_PAYLOAD
    for chunk in chunks:
        decoder.feed(chunk)
        assert decoder.buffered < largest_frame
    # An endless run of maximal headers whose bodies never come.
    decoder.feed((b"DV\x01\x01\x08\x00" + b"x" * 100) * 2000)
    assert decoder.buffered < largest_frame
    decoder.feed(bytes(10_000_000))
    assert decoder.buffered == 0 and decoder.buffered <= decoder.max_buffered


def test_pending_follows_a_frame_as_it_arrives() -> None:
    wire = encode_frame(Kind.RESPONSE, b"payload")
    decoder = FrameDecoder()
    assert not decoder.pending
    assert decoder.feed(wire[:3]) == [] and decoder.pending
    assert decoder.feed(wire[3:]) == [Frame(Kind.RESPONSE, b"payload")]
    assert not decoder.pending
    assert decoder.abandon() is None


def test_reset_drops_a_half_frame_and_the_next_frame_decodes() -> None:
    decoder = FrameDecoder()
    good = encode_frame(Kind.REQUEST, b"next")
    decoder.feed(encode_frame(Kind.REQUEST, b"cut off")[:9])
    decoder.reset()
    assert not decoder.pending and decoder.buffered == 0
    assert decoder.feed(good) == [Frame(Kind.REQUEST, b"next")]


def test_reset_clears_resynchronisation_so_new_noise_is_reported() -> None:
    decoder = FrameDecoder()
    assert len(decoder.feed(b"xyz")) == 1
    assert decoder.feed(b"more noise") == []  # the same bad stretch, reported once
    decoder.reset()
    assert len(decoder.feed(b"noise")) == 1


def test_a_bad_checksum_is_reported_and_the_following_frame_still_decodes() -> None:
    bad = bytearray(encode_frame(Kind.REQUEST, b"abc"))
    bad[-1] ^= 0xFF
    good = encode_frame(Kind.REQUEST, b"def")
    events = FrameDecoder().feed(bytes(bad) + good)
    assert isinstance(events[0], MalformedFrame) and "checksum" in str(events[0])
    assert events[1:] == [Frame(Kind.REQUEST, b"def")]
