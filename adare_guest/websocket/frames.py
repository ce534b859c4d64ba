"""RFC 6455 frames, server side, sans-I/O: client bytes in, messages and control frames out.

:class:`FrameParser` turns what a client sends after the opening handshake into
events: a :class:`DataMessage` (``str`` for text, ``bytes`` for binary, fragments
joined; a text message over ``max_text`` bytes comes as its checked UTF-8 ``bytes``,
for its receiver to refuse by size without paying for a ``str``), :class:`Ping`,
:class:`Pong` and :class:`Close`. A client that breaks the
protocol gets :class:`ProtocolViolation`, whose ``code`` is the close code to send:

- 1002: an unmasked frame (client frames must be masked), a reserved bit set (no
  extension is negotiated), an unknown opcode, a control frame over 125 bytes or
  fragmented, a continuation without a message to continue or a new message before
  the last one ended, a 64-bit length with its top bit set, a close payload of one
  byte or with a code not allowed on the wire;
- 1007: a text message or close reason that is not UTF-8 (checked as fragments arrive);
- 1009: a message over ``max_message`` bytes, refused as soon as the frame header
  announcing the excess arrives, before its payload is buffered.

Memory is bounded: after each :meth:`FrameParser.feed` the parser holds less than
:attr:`FrameParser.max_buffered` bytes (the incomplete message so far plus the
incomplete frame), whatever it was fed. While it completes a message it holds the
message twice at most: its bytes, unmasked in place, and the ``bytes`` handed out; or,
for a text message up to ``max_text``, its bytes and the ``str`` (up to 4 bytes a
character: 5 times the message's size in all, once). After a :class:`Close` the rest of the
stream is ignored; after a violation every feed raises it again.

Frames the server sends are built by :func:`frame_header` / :func:`encode_frame`
(unmasked, as RFC 6455 requires of a server) and :func:`close_payload`.

>>> parser = FrameParser(max_message=1024)
>>> mask = b"\\x01\\x02\\x03\\x04"
>>> frame = bytes([0x81, 0x85]) + mask + apply_mask(b"hello", mask)
>>> parser.feed(frame[:4]), parser.feed(frame[4:])
([], [DataMessage(data='hello')])
>>> encode_frame(Opcode.TEXT, b"hi")
b'\\x81\\x02hi'
"""

from __future__ import annotations

import codecs
import enum
import struct
from typing import Union

MAX_CONTROL_PAYLOAD = 125
"""Bytes a ping, pong or close frame may carry."""
MAX_CLOSE_REASON = MAX_CONTROL_PAYLOAD - 2
"""Bytes of UTF-8 a close reason may have (the code takes two)."""
_MAX_HEADER = 14  # 2 bytes, an 8-byte length, a 4-byte mask
_FEED_SLICE = 64 * 1024  # input is parsed in slices so the buffer stays bounded
_UNMASK_CHUNK = 1 << 18  # a multiple of 4: the mask stays aligned from chunk to chunk
# (256 KiB: a piece's big integers stay in the CPU's cache; measured twice the speed of 1 MiB)


class Opcode(enum.IntEnum):
    """Frame opcodes of RFC 6455 (the others are reserved)."""

    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


class CloseCode(enum.IntEnum):
    """Close codes the server sends or reports."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    NO_STATUS = 1005
    """Reported for a close frame without a code; never sent."""
    ABNORMAL = 1006
    """Reported when the connection ended without a close frame; never sent."""
    INVALID_DATA = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011


_DATA_OPCODES = frozenset({Opcode.CONTINUATION, Opcode.TEXT, Opcode.BINARY})
_KNOWN_OPCODES = frozenset(int(opcode) for opcode in Opcode)
_WIRE_CLOSE_CODES = frozenset(
    {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}
) | frozenset(range(3000, 5000))
"""Codes a close frame may carry (RFC 6455 §7.4 and the IANA registry)."""


class ProtocolViolation(Exception):
    """The client broke RFC 6455; close the connection with :attr:`code`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class _Event:
    """A value: equal to an event of the same class with equal fields. (Not a dataclass:
    making one costs ~0.4 ms of start-up, ten times that in an emulated guest.)"""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class DataMessage(_Event):
    """A complete message: ``str`` from text frames, ``bytes`` from binary ones."""

    __slots__ = ("data",)

    def __init__(self, data: str | bytes) -> None:
        self.data = data


class Ping(_Event):
    """A ping; answer it with a pong carrying the same payload."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class Pong(_Event):
    """A pong (the answer to a ping with the same payload, or unsolicited)."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class Close(_Event):
    """The client's close frame: its code (1005 when it gave none) and reason."""

    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


FrameEvent = Union[DataMessage, Ping, Pong, Close]  # run time: no ``|`` of classes on 3.9
"""What :meth:`FrameParser.feed` returns, in stream order."""


def apply_mask(data: bytes | bytearray | memoryview, mask: bytes) -> bytes:
    """``data`` XOR the 4-byte ``mask`` repeated (masking and unmasking are the same).

    Whole chunks are XORed as big integers, so this is fast in pure Python.
    """
    size = len(data)
    if size <= _UNMASK_CHUNK:
        return _xor(data, mask, size)
    out = bytearray(data)
    _unmask_in_place(out, 0, size, mask)
    return bytes(out)


def _unmask_in_place(buffer: bytearray, start: int, end: int, mask: bytes) -> None:
    """XOR ``buffer[start:end]`` with ``mask`` where it lies, a chunk at a time (so the
    only copies are one chunk's)."""
    whole: int | None = None  # the mask repeated over one chunk, made once per frame
    with memoryview(buffer) as view:
        for offset in range(start, end, _UNMASK_CHUNK):
            stop = min(offset + _UNMASK_CHUNK, end)
            if stop - offset < _UNMASK_CHUNK:
                view[offset:stop] = _xor(view[offset:stop], mask, stop - offset)
                continue
            if whole is None:
                whole = int.from_bytes(mask * (_UNMASK_CHUNK >> 2), "little")
            value = int.from_bytes(view[offset:stop], "little") ^ whole
            view[offset:stop] = value.to_bytes(_UNMASK_CHUNK, "little")


def _check_utf8(data: bytes | bytearray | memoryview) -> None:
    """:raise UnicodeDecodeError: ``data`` is not UTF-8 (checked a chunk at a time, the
    text thrown away)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with memoryview(data) as view:
        for offset in range(0, len(view), _UNMASK_CHUNK):
            decoder.decode(view[offset : offset + _UNMASK_CHUNK])
    decoder.decode(b"", final=True)


def _xor(data: bytes | bytearray | memoryview, mask: bytes, size: int) -> bytes:
    repeated = mask * (size >> 2) + mask[: size & 3]
    value = int.from_bytes(data, "little") ^ int.from_bytes(repeated, "little")
    return value.to_bytes(size, "little")


def frame_header(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """The header of an unmasked (server) frame with ``length`` payload bytes."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return bytes((first, length))
    if length < 1 << 16:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A whole unmasked (server) frame."""
    return frame_header(opcode, len(payload), fin=fin) + payload


def close_payload(code: int, reason: str = "") -> bytes:
    """The payload of a close frame: ``code`` and ``reason`` cut to 123 bytes of UTF-8
    (on a character boundary). :data:`CloseCode.NO_STATUS` gives an empty payload."""
    if code == CloseCode.NO_STATUS:
        return b""
    encoded = reason.encode("utf-8")[:MAX_CLOSE_REASON]
    encoded = encoded.decode("utf-8", "ignore").encode("utf-8")
    return struct.pack("!H", code) + encoded


def parse_close_payload(payload: bytes) -> Close:
    """The code and reason of a client's close frame.

    :raise ProtocolViolation: one byte, a code not allowed on the wire (1002), or a
        reason that is not UTF-8 (1007).
    """
    if not payload:
        return Close(CloseCode.NO_STATUS, "")
    if len(payload) == 1:
        raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, "close frame with a 1-byte payload")
    (code,) = struct.unpack("!H", payload[:2])
    if code not in _WIRE_CLOSE_CODES:
        raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, f"close code {code} is not allowed")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolViolation(CloseCode.INVALID_DATA, "close reason is not UTF-8") from None
    return Close(code, reason)


class FrameParser:
    """Parses the frames a client sends; see the module docstring for the rules.

    ``max_message`` bounds one message's payload (all its fragments together);
    ``max_text`` (default ``max_message``) is the largest text message decoded to
    ``str``: a larger one is checked and handed out as its UTF-8 ``bytes``.
    """

    def __init__(self, *, max_message: int, max_text: int | None = None) -> None:
        self.max_message = max_message
        self.max_text = max_message if max_text is None else max_text
        self.closed = False
        """A close frame arrived: everything after it is ignored."""
        self._buffer = bytearray()
        self._error: ProtocolViolation | None = None
        self._opcode: int | None = None  # of the message being received, if fragmented
        self._message = bytearray()  # the fragments so far of a fragmented message
        self._decoder: codecs.IncrementalDecoder | None = None  # checks a text's fragments
        self._message_size = 0

    @property
    def buffered(self) -> int:
        """Bytes held: the unfinished message's fragments plus the unfinished frame."""
        return len(self._buffer) + len(self._message)

    @property
    def max_buffered(self) -> int:
        """:attr:`buffered` stays below this after every :meth:`feed`."""
        return self.max_message + _MAX_HEADER + MAX_CONTROL_PAYLOAD

    def feed(self, data: bytes | bytearray | memoryview) -> list[FrameEvent]:
        """Take the next bytes of the stream; the events they complete, in order.

        :raise ProtocolViolation: the client broke the protocol (now or before).
        """
        if self._error is not None:
            raise self._error
        events: list[FrameEvent] = []
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _FEED_SLICE):
            if self.closed:
                break
            self._buffer += view[start : start + _FEED_SLICE]
            try:
                self._parse(events)
            except ProtocolViolation as exc:
                self._fail(exc)
                raise
        if self.closed:
            self._buffer.clear()
        return events

    def _fail(self, exc: ProtocolViolation) -> None:
        self._error = exc
        self._buffer = bytearray()
        self._message = bytearray()
        self._message_size = 0

    def _parse(self, events: list[FrameEvent]) -> None:
        buffer = self._buffer
        pos = 0
        try:
            while not self.closed:
                frame = self._frame_at(pos)
                if frame is None:
                    return
                fin, opcode, start, length = frame
                end = start + length
                _unmask_in_place(buffer, start, end, bytes(buffer[start - 4 : start]))
                pos = end
                self._handle(fin, opcode, start, end, events)
        finally:
            # A frame as large as the rest is copied away, so the memory of a big one is
            # given back at once (deleting a bytearray's head only moves its start).
            if pos > len(buffer) - pos:
                self._buffer = buffer[pos:]
            else:
                del buffer[:pos]

    def _frame_at(self, pos: int) -> tuple[bool, int, int, int] | None:
        """``(fin, opcode, payload start, payload length)`` of the frame at ``pos`` once
        it is complete, else None; checks the header as soon as its bytes are there."""
        buffer = self._buffer
        available = len(buffer) - pos
        if available < 2:
            return None
        first, second = buffer[pos], buffer[pos + 1]
        fin, opcode, length = bool(first & 0x80), first & 0x0F, second & 0x7F
        self._check_start(first, second, fin, opcode, length)
        header = 2
        if length == 126:
            header = 4
            if available < header:
                return None
            (length,) = struct.unpack_from("!H", buffer, pos + 2)
        elif length == 127:
            header = 10
            if available < header:
                return None
            (length,) = struct.unpack_from("!Q", buffer, pos + 2)
            if length >> 63:
                raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, "frame length over 2**63")
        if opcode in _DATA_OPCODES and self._message_size + length > self.max_message:
            raise ProtocolViolation(
                CloseCode.MESSAGE_TOO_BIG,
                f"message of {self._message_size + length} bytes or more exceeds the limit "
                f"of {self.max_message} bytes",
            )
        header += 4
        if available < header + length:
            return None
        return fin, opcode, pos + header, length

    def _check_start(self, first: int, second: int, fin: bool, opcode: int, length: int) -> None:
        """The rules the first two header bytes can break."""
        if first & 0x70:
            raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, "reserved bits set")
        if opcode not in _KNOWN_OPCODES:
            raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if not second & 0x80:
            raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, "client frames must be masked")
        if opcode in _DATA_OPCODES:
            if opcode == Opcode.CONTINUATION and self._opcode is None:
                raise ProtocolViolation(
                    CloseCode.PROTOCOL_ERROR, "continuation frame without a message to continue"
                )
            if opcode != Opcode.CONTINUATION and self._opcode is not None:
                raise ProtocolViolation(
                    CloseCode.PROTOCOL_ERROR, "new message before the fragmented one ended"
                )
            return
        if length > MAX_CONTROL_PAYLOAD:
            raise ProtocolViolation(
                CloseCode.PROTOCOL_ERROR, f"control frame over {MAX_CONTROL_PAYLOAD} bytes"
            )
        if not fin:
            raise ProtocolViolation(CloseCode.PROTOCOL_ERROR, "fragmented control frame")

    def _handle(
        self, fin: bool, opcode: int, start: int, end: int, events: list[FrameEvent]
    ) -> None:
        """The frame whose unmasked payload is ``self._buffer[start:end]``."""
        if opcode in _DATA_OPCODES:
            with memoryview(self._buffer) as view, view[start:end] as payload:
                self._add_fragment(fin, opcode, payload, events)
            return
        payload_bytes = bytes(self._buffer[start:end])
        if opcode == Opcode.PING:
            events.append(Ping(payload_bytes))
        elif opcode == Opcode.PONG:
            events.append(Pong(payload_bytes))
        else:
            events.append(parse_close_payload(payload_bytes))
            self.closed = True

    def _add_fragment(
        self, fin: bool, opcode: int, payload: memoryview, events: list[FrameEvent]
    ) -> None:
        if opcode != Opcode.CONTINUATION:
            self._opcode = opcode
            if fin:  # the whole message in one frame: decoded (or copied) once, from here
                events.append(DataMessage(self._message_data(payload)))
                self._opcode = None
                return
            if opcode == Opcode.TEXT:
                self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._message_size += len(payload)
        if self._decoder is not None:
            try:  # fail a bad fragment at once; the text is made once, at the end
                self._decoder.decode(payload)
            except UnicodeDecodeError:
                raise ProtocolViolation(
                    CloseCode.INVALID_DATA, "text message is not valid UTF-8"
                ) from None
        self._message += payload
        if not fin:
            return
        message, self._message = self._message, bytearray()
        self._decoder, self._message_size = None, 0
        events.append(DataMessage(self._message_data(message)))
        self._opcode = None

    def _message_data(self, data: memoryview | bytearray) -> str | bytes:
        """A whole message's payload as it is handed out (see the class docstring)."""
        try:
            if self._opcode == Opcode.TEXT and len(data) <= self.max_text:
                return str(data, "utf-8")
            if self._opcode == Opcode.TEXT:
                _check_utf8(data)
        except UnicodeDecodeError:
            raise ProtocolViolation(
                CloseCode.INVALID_DATA, "text message is not valid UTF-8"
            ) from None
        return bytes(data)
