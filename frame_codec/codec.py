"""One DV frame: its layout, its limits, and whole-frame encode/decode.

Layout (big-endian)::

    offset 0  2 bytes  magic "DV"
    offset 2  1 byte   version (1)
    offset 3  1 byte   kind (1 request, 2 response)
    offset 4  2 bytes  payload length N
    offset 6  N bytes  payload
    offset 6+N 2 bytes CRC-16/CCITT-FALSE over bytes 2 .. 6+N (version, kind, length, payload)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from frame_codec.crc import BytesLike, Checksum, crc16_ccitt_false
from frame_codec.errors import FrameError, FrameTooLarge, MalformedFrame, PartialFrame

MAGIC = b"DV"
VERSION = 1
HEADER_SIZE = 6
CHECKSUM_SIZE = 2
OVERHEAD = HEADER_SIZE + CHECKSUM_SIZE
MAX_REQUEST_PAYLOAD = 2048
MAX_RESPONSE_PAYLOAD = 1024
MAX_LENGTH_FIELD = 0xFFFF


class Kind(enum.IntEnum):
    """Who sends a frame: the host sends requests, the guest answers with responses."""

    REQUEST = 1
    RESPONSE = 2


@dataclass(frozen=True)
class Limits:
    """Largest payload accepted per kind (checked on encode and on decode)."""

    request: int = MAX_REQUEST_PAYLOAD
    response: int = MAX_RESPONSE_PAYLOAD

    def __post_init__(self) -> None:
        for name in ("request", "response"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_LENGTH_FIELD:
                raise ValueError(f"{name} payload limit must be 0..{MAX_LENGTH_FIELD}, got {value}")

    def for_kind(self, kind: Kind) -> int:
        """The payload limit for ``kind``."""
        return self.request if kind is Kind.REQUEST else self.response


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Frame:
    """A decoded frame: its kind and its payload (opaque bytes)."""

    kind: Kind
    payload: bytes


def as_bytes(data: BytesLike) -> memoryview:
    """``data`` as a view of unsigned bytes: lengths and offsets count bytes, whatever
    the item format of a given ``memoryview`` (``memoryview(b).cast("H")`` has half as
    many items as bytes)."""
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _to_kind(value: int) -> Kind:
    try:
        return Kind(value)
    except ValueError:
        raise MalformedFrame(f"unknown frame kind {value} (1 request, 2 response)") from None


def header_error(prefix: BytesLike, limits: Limits = DEFAULT_LIMITS) -> FrameError | None:
    """Check the first up to 6 bytes of a frame; the error for the first bad field, or ``None``.

    Fields not yet present in ``prefix`` are not judged, so a transport can reject a bad
    frame as early as the offending byte arrives.
    """
    head = bytes(as_bytes(prefix)[:HEADER_SIZE])
    if not MAGIC.startswith(head[:2]):
        return MalformedFrame(f"bad magic {head[:2]!r}, expected {MAGIC!r}")
    if len(head) > 2 and head[2] != VERSION:
        return MalformedFrame(f"unsupported frame version {head[2]}, expected {VERSION}")
    if len(head) > 3:
        try:
            kind = _to_kind(head[3])
        except MalformedFrame as error:
            return error
        if len(head) == HEADER_SIZE:
            length = int.from_bytes(head[4:6], "big")
            if length > limits.for_kind(kind):
                return FrameTooLarge(kind, length, limits.for_kind(kind))
    return None


def encode_frame(
    kind: Kind | int,
    payload: BytesLike,
    *,
    limits: Limits = DEFAULT_LIMITS,
    checksum: Checksum = crc16_ccitt_false,
) -> bytes:
    """Encode one frame.

    :raise MalformedFrame: ``kind`` is not 1 or 2.
    :raise FrameTooLarge: ``payload`` is longer than the limit for ``kind``.

    >>> encode_frame(Kind.REQUEST, b"hi").hex()
    '4456010100026869f08d'
    """
    frame_kind = _to_kind(kind)
    payload = as_bytes(payload)
    length = len(payload)
    if length > limits.for_kind(frame_kind):
        raise FrameTooLarge(frame_kind, length, limits.for_kind(frame_kind))
    buffer = bytearray(MAGIC)
    buffer += bytes((VERSION, frame_kind)) + length.to_bytes(2, "big")
    buffer += payload
    buffer += checksum(memoryview(buffer)[2:]).to_bytes(2, "big")
    return bytes(buffer)


def frame_size(header: BytesLike) -> int:
    """Total size in bytes of the frame whose (valid, complete) 6-byte header is given."""
    return OVERHEAD + int.from_bytes(as_bytes(header)[4:6], "big")


def checked_frame(data: BytesLike, checksum: Checksum = crc16_ccitt_false) -> Frame:
    """Verify the checksum of exactly one complete frame with a valid header; the frame.

    :raise MalformedFrame: the checksum does not match.
    """
    view = as_bytes(data)
    end = len(view) - CHECKSUM_SIZE
    expected = int.from_bytes(view[end:], "big")
    actual = checksum(view[2:end])
    if actual != expected:
        raise MalformedFrame(
            f"checksum mismatch: frame says 0x{expected:04X}, content gives 0x{actual:04X}"
        )
    return Frame(Kind(view[3]), bytes(view[HEADER_SIZE:end]))


def decode_frame(
    data: BytesLike, *, limits: Limits = DEFAULT_LIMITS, checksum: Checksum = crc16_ccitt_false
) -> Frame:
    """Decode ``data`` holding exactly one complete frame.

    :raise MalformedFrame: bad magic, version, kind or checksum, or bytes after the frame.
    :raise FrameTooLarge: the header announces a payload above the limit for its kind.
    :raise PartialFrame: ``data`` ends before the frame does.

    >>> decode_frame(bytes.fromhex("4456010100026869f08d"))
    Frame(kind=<Kind.REQUEST: 1>, payload=b'hi')
    """
    data = as_bytes(data)
    error = header_error(data, limits)
    if error is not None:
        raise error
    if len(data) < HEADER_SIZE:
        raise PartialFrame(len(data), None)
    size = frame_size(data)
    if len(data) < size:
        raise PartialFrame(len(data), size)
    if len(data) > size:
        raise MalformedFrame(f"{len(data) - size} unexpected bytes after a {size}-byte frame")
    return checked_frame(data, checksum)
