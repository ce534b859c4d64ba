"""Errors raised (or reported) by the frame codec.

All of them are :class:`ValueError` subclasses: they describe bad bytes, never a
broken program or a failed I/O call.
"""

from __future__ import annotations


class FrameError(ValueError):
    """Root of every frame codec error."""


class MalformedFrame(FrameError):
    """Bytes that are not a valid frame: bad magic, version, kind or checksum, or trailing bytes."""


class FrameTooLarge(FrameError):
    """A payload length above the limit for its kind.

    Raised on encode, and on decode as soon as the 6-byte header is seen, before any
    payload byte is buffered.
    """

    def __init__(self, kind: int, length: int, limit: int) -> None:
        self.kind = kind
        self.length = length
        self.limit = limit
        super().__init__(
            f"payload of {length} bytes exceeds the {limit}-byte limit for frame kind {kind}"
        )


class PartialFrame(FrameError):
    """A frame that was cut off: fewer bytes arrived than its header announced.

    ``received`` is how many bytes of the frame arrived; ``expected`` is the frame's
    full size, or ``None`` when not even the 6-byte header arrived.
    """

    def __init__(self, received: int, expected: int | None) -> None:
        self.received = received
        self.expected = expected
        wanted = "a 6-byte header" if expected is None else f"a {expected}-byte frame"
        super().__init__(f"frame cut off: {received} bytes received of {wanted}")
