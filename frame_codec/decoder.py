"""Incremental, resynchronising frame decoder (sans-I/O): bytes in, frames and errors out."""

from __future__ import annotations

from typing import Union

from frame_codec.codec import (
    DEFAULT_LIMITS,
    HEADER_SIZE,
    MAGIC,
    OVERHEAD,
    Frame,
    Limits,
    checked_frame,
    frame_size,
    header_error,
)
from frame_codec.crc import BytesLike, Checksum, crc16_ccitt_false
from frame_codec.errors import FrameError, MalformedFrame, PartialFrame

DecodeEvent = Union[Frame, FrameError]  # evaluated at run time: no ``|`` on 3.9
"""What :meth:`FrameDecoder.feed` yields: a good frame, or the error for a bad stretch of bytes."""

_FEED_SLICE = 4096  # input is taken in slices so the buffer stays bounded whatever is fed


class FrameDecoder:
    """Turn a byte stream into frames, whatever the split, noise or corruption.

    Feed it bytes as they arrive; it returns, in stream order, every complete frame and
    an error for every bad stretch (a bad header, a checksum mismatch, noise where a
    frame should start). After an error it resynchronises on the next ``DV``; noise
    following an error is skipped silently until the next good frame. An over-limit
    length is rejected as soon as the header arrives. The buffer never exceeds the
    largest frame plus one input slice, whatever it is fed.

    >>> from frame_codec import Kind, encode_frame
    >>> decoder = FrameDecoder()
    >>> wire = encode_frame(Kind.RESPONSE, b"pong")
    >>> decoder.feed(b"junk" + wire[:5]), decoder.pending
    ([MalformedFrame(...)], True)
    >>> decoder.feed(wire[5:])
    [Frame(kind=<Kind.RESPONSE: 2>, payload=b'pong')]
    """

    def __init__(
        self,
        *,
        max_request_payload: int = DEFAULT_LIMITS.request,
        max_response_payload: int = DEFAULT_LIMITS.response,
        checksum: Checksum = crc16_ccitt_false,
    ) -> None:
        self.limits = Limits(max_request_payload, max_response_payload)
        self._checksum = checksum
        self._buffer = bytearray()
        self._resyncing = False
        self.discarded = 0
        """Bytes thrown away so far as noise or as parts of bad frames."""

    @property
    def pending(self) -> bool:
        """Whether a frame has started arriving but is not complete yet."""
        return bool(self._buffer)

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete frame are held."""
        return len(self._buffer)

    @property
    def max_buffered(self) -> int:
        """Upper bound of :attr:`buffered`, whatever is fed."""
        return OVERHEAD + max(self.limits.request, self.limits.response) + _FEED_SLICE

    def feed(self, data: BytesLike) -> list[DecodeEvent]:
        """Take the next bytes of the stream; the frames and errors they complete, in order."""
        events: list[DecodeEvent] = []
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _FEED_SLICE):
            self._buffer += view[start : start + _FEED_SLICE]
            self._parse(events)
        return events

    def abandon(self) -> PartialFrame | None:
        """The bounded wait for more bytes expired: drop a half-received frame.

        Returns the :class:`PartialFrame` describing it (``None`` when nothing was
        pending) and leaves the decoder reset.
        """
        partial = None
        if self._buffer:
            expected = frame_size(self._buffer) if len(self._buffer) >= HEADER_SIZE else None
            partial = PartialFrame(len(self._buffer), expected)
        self.reset()
        return partial

    def reset(self) -> None:
        """Drop every buffered byte and all resynchronisation state."""
        self._buffer.clear()
        self._resyncing = False

    def _parse(self, events: list[DecodeEvent]) -> None:
        buffer = self._buffer
        while buffer:
            if not buffer.startswith(MAGIC) and not self._skip_to_magic(events):
                return
            error = header_error(buffer, self.limits)
            if error is not None:
                self._drop_bad(error, events)
                continue
            if len(buffer) < HEADER_SIZE:
                return
            size = frame_size(buffer)
            if len(buffer) < size:
                return
            try:
                frame = checked_frame(buffer[:size], self._checksum)
            except MalformedFrame as mismatch:
                self._drop_bad(mismatch, events)
                continue
            del buffer[:size]
            self._resyncing = False
            events.append(frame)

    def _skip_to_magic(self, events: list[DecodeEvent]) -> bool:
        """Discard noise up to the next ``DV``; whether the buffer now starts with it."""
        buffer = self._buffer
        start = buffer.find(MAGIC)
        if start < 0:
            # A trailing "D" may be the first half of the next magic.
            start = len(buffer) - 1 if buffer.endswith(MAGIC[:1]) else len(buffer)
        if start and not self._resyncing:
            events.append(
                MalformedFrame(f"noise where a frame should start (byte 0x{buffer[0]:02X})")
            )
            self._resyncing = True
        self.discarded += start
        del buffer[:start]
        return buffer.startswith(MAGIC)

    def _drop_bad(self, error: FrameError, events: list[DecodeEvent]) -> None:
        # Only the magic is dropped: a good frame may hide in what looked like a bad
        # frame's body (for example noise that happened to look like a header).
        events.append(error)
        self._resyncing = True
        dropped = min(len(self._buffer), len(MAGIC))
        self.discarded += dropped
        del self._buffer[:dropped]
