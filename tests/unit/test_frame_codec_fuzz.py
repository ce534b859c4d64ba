"""Fuzz properties of the DV frame codec under hostile input (issue 12).

Whatever bytes arrive, in whatever split and through whatever buffer type, only
``FrameError``s come out; a valid frame decodes whatever the item format of the view
it is handed in; a frame cut short is a ``PartialFrame``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from frame_codec import (
    DecodeEvent,
    Frame,
    FrameDecoder,
    FrameError,
    Kind,
    PartialFrame,
    decode_frame,
    encode_frame,
)

# Formats whose items are wider than one byte: lengths in items differ from bytes.
WIDE_FORMATS = ("H", "I", "Q")


def frames(max_size: int = 300) -> st.SearchStrategy[Frame]:
    return st.builds(Frame, st.sampled_from(Kind), st.binary(max_size=max_size))


def padded_wire(frame: Frame, item_size: int) -> bytes:
    """The frame's wire bytes with a payload grown until the frame fills whole items."""
    payload = frame.payload
    while (len(payload) + 8) % item_size:
        payload += b"\x00"
    return encode_frame(frame.kind, payload)


def hostile_bytes() -> st.SearchStrategy[bytes]:
    """Random bytes, mutated frames and bare headers announcing anything."""
    mutated = st.tuples(frames(), st.integers(0, 400), st.integers(0, 255)).map(
        lambda t: _mutate(encode_frame(t[0].kind, t[0].payload), t[1], t[2])
    )
    headers = st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 0xFFFF)).map(
        lambda t: b"DV" + bytes((t[0], t[1])) + t[2].to_bytes(2, "big")
    )
    return st.one_of(st.binary(max_size=3000), mutated, headers)


def _mutate(wire: bytes, position: int, value: int) -> bytes:
    index = position % len(wire)
    return wire[:index] + bytes((value,)) + wire[index + 1 :]


def comparable(events: list[DecodeEvent]) -> list[object]:
    return [e if isinstance(e, Frame) else (type(e), str(e)) for e in events]


@settings(deadline=None)
@given(frames(), st.sampled_from(WIDE_FORMATS))
def test_a_valid_frame_decodes_through_a_view_of_any_item_size(
    frame: Frame, item_format: str
) -> None:
    wire = padded_wire(frame, memoryview(b"").cast("B").cast(item_format).itemsize)
    decoded = decode_frame(memoryview(wire).cast(item_format))
    assert decoded == decode_frame(wire)


def test_the_reported_cast_h_frame_decodes() -> None:
    frame = encode_frame(Kind.REQUEST, b"hi")
    assert decode_frame(memoryview(frame).cast("H")) == Frame(Kind.REQUEST, b"hi")


@settings(deadline=None)
@given(frames(), st.sampled_from(WIDE_FORMATS))
def test_encode_counts_bytes_of_a_wide_payload_view(frame: Frame, item_format: str) -> None:
    size = memoryview(b"").cast("B").cast(item_format).itemsize
    payload = frame.payload[: len(frame.payload) - len(frame.payload) % size]
    wide = memoryview(payload).cast(item_format)
    assert encode_frame(frame.kind, wide) == encode_frame(frame.kind, payload)


@settings(deadline=None, max_examples=300)
@given(hostile_bytes())
def test_only_frame_errors_escape_decode_frame(data: bytes) -> None:
    for view in (data, bytearray(data), memoryview(data)):
        try:
            decode_frame(view)
        except FrameError:
            pass


@settings(deadline=None, max_examples=200)
@given(st.lists(hostile_bytes(), max_size=6))
def test_the_decoder_returns_errors_and_never_raises(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    for chunk in chunks:
        events = decoder.feed(chunk)
        assert all(isinstance(e, (Frame, FrameError)) for e in events)
    leftover = decoder.abandon()
    assert leftover is None or isinstance(leftover, PartialFrame)
    assert not decoder.pending


@settings(deadline=None)
@given(st.lists(hostile_bytes(), max_size=5).map(b"".join), st.data())
def test_any_split_and_any_view_format_give_the_same_events(
    stream: bytes, data: st.DataObject
) -> None:
    whole = comparable(FrameDecoder().feed(stream))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    events: list[DecodeEvent] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        piece = stream[start:end]
        events += decoder.feed(memoryview(piece).cast("H") if len(piece) % 2 == 0 else piece)
    assert comparable(events) == whole


@settings(deadline=None)
@given(frames(), st.data())
def test_a_truncated_frame_is_a_partial_frame(frame: Frame, data: st.DataObject) -> None:
    wire = encode_frame(frame.kind, frame.payload)
    cut = data.draw(st.integers(0, len(wire) - 1))
    try:
        decode_frame(wire[:cut])
    except PartialFrame as partial:
        assert partial.received == cut
    else:
        raise AssertionError(f"a frame cut at {cut} of {len(wire)} bytes decoded")
    decoder = FrameDecoder()
    assert decoder.feed(wire[:cut]) == []
    leftover = decoder.abandon()
    assert (leftover is None) == (cut == 0)
    assert leftover is None or leftover.received == cut
