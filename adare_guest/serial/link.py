"""The serial link layer over DV frames (DESIGN §4), sans-I/O; bytes in docs/serial-link.md.

The host sends one REQUEST frame and waits for exactly one RESPONSE frame; one
exchange is in flight at a time. Every payload starts with an opcode byte and a
sequence byte; the rest depends on the opcode::

    request  payload: op (1) | seq (1) | body
    response payload: op (1) | seq (1) | body      (seq echoes the request; 0 = unsolicited)

Requests: ``PING`` (health report), ``OPEN`` (new session), ``SEND`` (one fragment of a
host→guest protocol message), ``POLL`` (next fragment of a queued guest→host message),
``ABORT`` (drop a half-sent message), ``CLOSE`` (end the session), ``SEND_BINARY`` (one
fragment of a host→guest binary transfer message; guest→host ones are polled with the
``BINARY`` flag). The guest answers
each with the same opcode plus 0x80, or with ``ERROR``. A request equal to the previous
one (same seq and bytes) is a retransmission: the guest repeats its previous answer
without acting again, so the host may resend after a lost or corrupted answer.

:class:`GuestLink` is the guest's state machine, :class:`HostLink` the host's; both
only turn bytes into bytes and events. Payloads are untrusted on both sides: every
field is checked and reassembly is bounded.
"""

from __future__ import annotations

import enum
import json
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Union

from frame_codec import (
    MAX_REQUEST_PAYLOAD,
    MAX_RESPONSE_PAYLOAD,
    Frame,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    Kind,
    PartialFrame,
    encode_frame,
)

LINK_VERSION = 1
MAX_HOST_MESSAGE = 16 * 1024 * 1024
"""Largest host→guest message (DESIGN §3)."""
DEFAULT_MAX_GUEST_MESSAGE = 512 * 1024 * 1024
"""Host-side bound on one reassembled guest→host message (the protocol sets none)."""
DEFAULT_MAX_QUEUED = 512 * 1024 * 1024
"""Guest-side bound on the bytes waiting to be polled."""

PREFIX_SIZE = 2  # op + seq
FRAGMENT_HEADER_SIZE = 8  # total (u32) + offset (u32)
SEND_CHUNK = MAX_REQUEST_PAYLOAD - PREFIX_SIZE - FRAGMENT_HEADER_SIZE
"""Message bytes per SEND request (2038)."""
POLL_CHUNK = MAX_RESPONSE_PAYLOAD - PREFIX_SIZE - 1 - FRAGMENT_HEADER_SIZE
"""Message bytes per POLL answer (1013)."""
UNSOLICITED_SEQ = 0
"""The seq of an ERROR that answers no particular request (noise, a cut-off frame)."""


class Op(enum.IntEnum):
    """Request opcodes; an answer carries ``op | 0x80`` (or ``ERROR``)."""

    PING = 0x01
    OPEN = 0x02
    SEND = 0x03
    POLL = 0x04
    ABORT = 0x05
    CLOSE = 0x06
    SEND_BINARY = 0x07
    """Like SEND, for a binary message (raw bytes, docs/agent.md "Binary transfer")."""
    ERROR = 0x7F
    """Only in responses (as ``0xFF``)."""

    @property
    def answer(self) -> int:
        """The response opcode of this request."""
        return self | 0x80


ERROR_ANSWER = Op.ERROR.answer


class ErrorCode(enum.IntEnum):
    """Why the guest answered ``ERROR``."""

    MALFORMED_FRAME = 1
    PARTIAL_FRAME = 2
    TOO_LARGE = 3
    BAD_REQUEST = 4
    OUT_OF_SEQUENCE = 5
    BAD_MESSAGE = 6
    QUEUE_FULL = 7


class PollFlag(enum.IntFlag):
    """First body byte of a POLL answer."""

    DATA = 0x01
    """A fragment follows."""
    MORE = 0x02
    """More is queued after this fragment: poll again at once."""
    BINARY = 0x04
    """The fragment belongs to a binary message (raw bytes, not JSON text)."""


class LinkError(ValueError):
    """A link payload that breaks the rules above; ``code`` is what the guest answers."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        super().__init__(message)


# --- payload codecs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    """A decoded request or response payload."""

    op: int
    seq: int
    body: bytes


def encode_packet(op: int, seq: int, body: bytes = b"") -> bytes:
    """``op | seq | body`` (the caller keeps it within the frame limit)."""
    return bytes((op, seq)) + body


def parse_packet(payload: bytes) -> Packet:
    """Split a payload into opcode, seq and body.

    :raise LinkError: fewer than 2 bytes.
    """
    if len(payload) < PREFIX_SIZE:
        raise LinkError(ErrorCode.BAD_REQUEST, f"payload of {len(payload)} bytes has no op/seq")
    return Packet(payload[0], payload[1], payload[PREFIX_SIZE:])


@dataclass(frozen=True)
class Fragment:
    """``length`` bytes of a ``total``-byte message starting at ``offset``."""

    total: int
    offset: int
    data: bytes

    def encode(self) -> bytes:
        """``total (u32) | offset (u32) | data``."""
        return self.total.to_bytes(4, "big") + self.offset.to_bytes(4, "big") + self.data

    @classmethod
    def parse(cls, body: bytes) -> Fragment:
        """:raise LinkError: the body is too short for the fragment header."""
        if len(body) < FRAGMENT_HEADER_SIZE:
            raise LinkError(ErrorCode.BAD_REQUEST, f"fragment body of {len(body)} bytes")
        return cls(
            int.from_bytes(body[:4], "big"),
            int.from_bytes(body[4:8], "big"),
            bytes(body[FRAGMENT_HEADER_SIZE:]),
        )


def fragments(message: bytes, chunk: int) -> Iterator[Fragment]:
    """Cut ``message`` (non-empty) into fragments of at most ``chunk`` bytes."""
    for offset in range(0, len(message), chunk):
        yield Fragment(len(message), offset, message[offset : offset + chunk])


class Reassembler:
    """Collect the fragments of one message, in order, up to ``max_size`` bytes."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._parts: list[bytes] = []
        self._total = 0
        self.received = 0

    @property
    def in_progress(self) -> bool:
        """Whether a message has started and is not complete."""
        return self.received > 0

    def add(self, fragment: Fragment) -> bytes | None:
        """Take the next fragment; the whole message when it is complete, else ``None``.

        A rejected fragment drops the message in progress.

        :raise LinkError: out of order, inconsistent total, empty, or above ``max_size``.
        """
        try:
            self._check(fragment)
        except LinkError:
            self.reset()
            raise
        self._parts.append(fragment.data)
        self._total = fragment.total
        self.received += len(fragment.data)
        if self.received < self._total:
            return None
        message = b"".join(self._parts)
        self.reset()
        return message

    def _check(self, fragment: Fragment) -> None:
        if fragment.total > self.max_size:
            raise LinkError(
                ErrorCode.TOO_LARGE,
                f"message of {fragment.total} bytes exceeds the {self.max_size}-byte limit",
            )
        if fragment.total == 0 or not fragment.data:
            raise LinkError(ErrorCode.BAD_REQUEST, "empty message or fragment")
        if fragment.offset != self.received:
            raise LinkError(
                ErrorCode.OUT_OF_SEQUENCE,
                f"fragment at offset {fragment.offset}, expected {self.received}",
            )
        if self.in_progress and fragment.total != self._total:
            raise LinkError(
                ErrorCode.OUT_OF_SEQUENCE,
                f"message size changed from {self._total} to {fragment.total} mid-message",
            )
        if fragment.offset + len(fragment.data) > fragment.total:
            raise LinkError(ErrorCode.BAD_REQUEST, "fragment runs past the end of its message")

    def reset(self) -> int:
        """Drop the message in progress; how many bytes were dropped."""
        dropped = self.received
        self._parts.clear()
        self._total = 0
        self.received = 0
        return dropped


def error_name(code: int) -> str:
    """The name of an error code, also for codes this side does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def encode_error(seq: int, code: ErrorCode, message: str) -> bytes:
    """An ERROR answer payload, its text cut to fit one response frame."""
    room = MAX_RESPONSE_PAYLOAD - PREFIX_SIZE - 1
    text = message.encode("utf-8", "replace")[:room]
    return encode_packet(ERROR_ANSWER, seq, bytes((code,)) + text)


def json_body(value: dict[str, Any], room: int) -> bytes:
    """``value`` as compact UTF-8 JSON; long string fields are shortened until it fits ``room``.

    :raise ValueError: it cannot be made to fit.
    """
    data = dict(value)
    while True:
        body = json.dumps(data, separators=(",", ":"), default=str).encode()
        if len(body) <= room:
            return body
        longest = max(
            (k for k, v in data.items() if isinstance(v, str) and len(v) > 19),
            key=lambda k: len(data[k]),
            default=None,
        )
        if longest is None:
            raise ValueError(f"JSON of {len(body)} bytes does not fit {room} bytes")
        text = data[longest]
        data[longest] = text[: max(16, len(text) - (len(body) - room) - 3)] + "..."


# --- the guest side ---------------------------------------------------------------------


@dataclass(frozen=True)
class MessageReceived:
    """A complete host→guest message (UTF-8 text, not yet parsed as protocol)."""

    text: str


@dataclass(frozen=True)
class BinaryReceived:
    """A complete host→guest binary message (a transfer message, raw bytes)."""

    data: bytes


@dataclass(frozen=True)
class SessionRequested:
    """The host opened a new session: forget the old one and its queued messages."""


@dataclass(frozen=True)
class SessionEnded:
    """The host closed its session: cancel its calls; nothing is polled until the next OPEN."""


# Evaluated at run time: Union, since the guest's Python 3.9 has no ``X | Y`` of classes.
LinkEvent = Union[MessageReceived, BinaryReceived, SessionRequested, SessionEnded]


class GuestLink:
    """The guest's side of the link: frames in, answers out, messages and events up.

    ``health()`` gives the PING report. Feed received bytes to :meth:`receive_data`,
    then write :meth:`data_to_send` and act on :meth:`events_received`. When
    :attr:`drain_requested` is set, discard the input the device already holds before
    the next exchange. Call :meth:`receive_timeout` when a bounded wait for the rest of
    a frame expires. Queue guest→host messages with :meth:`queue_message`.
    """

    def __init__(
        self,
        health: Callable[[], dict[str, Any]],
        *,
        max_message: int = MAX_HOST_MESSAGE,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self._health = health
        self._decoder = FrameDecoder()
        self._inbound = Reassembler(max_message)
        self._inbound_binary = False
        self._outbound: deque[tuple[bytes, bool]] = deque()  # (message, binary)
        self._out_offset = 0
        self.queued_bytes = 0
        self.max_queued = max_queued
        self._to_send: list[bytes] = []
        self._events: list[LinkEvent] = []
        self._last: tuple[bytes, bytes] | None = None  # (request payload, answer frame)
        self.drain_requested = False
        self.errors = 0
        """How many ERROR answers were sent (noise, bad frames, bad requests)."""

    @property
    def frame_pending(self) -> bool:
        """A request frame has started arriving but is not complete."""
        return self._decoder.pending

    def receive_data(self, data: bytes) -> None:
        """Take bytes read from the device."""
        for item in self._decoder.feed(data):
            if isinstance(item, Frame):
                self._on_frame(item)
            else:
                code = (
                    ErrorCode.TOO_LARGE
                    if isinstance(item, FrameTooLarge)
                    else ErrorCode.MALFORMED_FRAME
                )
                self._unsolicited_error(code, str(item))

    def receive_timeout(self) -> PartialFrame | None:
        """The wait for the rest of a frame expired: answer PARTIAL_FRAME and reset."""
        partial = self._decoder.abandon()
        if partial is not None:
            self._unsolicited_error(ErrorCode.PARTIAL_FRAME, str(partial))
        return partial

    def data_to_send(self) -> bytes:
        """The encoded answer frames to write, in order (and forget them)."""
        data, self._to_send = b"".join(self._to_send), []
        return data

    def events_received(self) -> list[LinkEvent]:
        """Messages and session requests since the last call, in order."""
        events, self._events = self._events, []
        return events

    def take_drain_request(self) -> bool:
        """Whether the transport should discard buffered input now (clears the request)."""
        drain, self.drain_requested = self.drain_requested, False
        return drain

    def queue_message(self, text: str | bytes) -> None:
        """Queue a guest→host message for the host to poll: ``str`` (JSON text) or
        ``bytes`` (a binary message, polled with the ``BINARY`` flag).

        :raise LinkError: ``QUEUE_FULL`` when it would exceed :attr:`max_queued` bytes.
        """
        binary = isinstance(text, bytes)
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
        if not data:
            raise ValueError("cannot queue an empty message")
        if self.queued_bytes + len(data) > self.max_queued:
            raise LinkError(
                ErrorCode.QUEUE_FULL,
                f"{self.queued_bytes} bytes already wait to be polled; "
                f"dropping a {len(data)}-byte message",
            )
        self._outbound.append((data, binary))
        self.queued_bytes += len(data)

    def clear_outbound(self) -> None:
        """Drop every queued guest→host message."""
        self._outbound.clear()
        self._out_offset = 0
        self.queued_bytes = 0

    # -- handling one request --------------------------------------------------------

    def _on_frame(self, frame: Frame) -> None:
        if frame.kind is not Kind.REQUEST:
            self._unsolicited_error(ErrorCode.BAD_REQUEST, "the guest only accepts request frames")
            return
        if self._last is not None and self._last[0] == frame.payload:
            self._to_send.append(self._last[1])  # a retransmission: same answer, no action
            return
        seq = frame.payload[1] if len(frame.payload) > 1 else UNSOLICITED_SEQ
        try:
            answer = self._answer(parse_packet(frame.payload))
        except LinkError as error:
            answer = encode_error(seq, error.code, str(error))
            self.errors += 1
        wire = encode_frame(Kind.RESPONSE, answer)
        self._last = (frame.payload, wire)
        self._to_send.append(wire)

    def _answer(self, packet: Packet) -> bytes:
        try:
            op = Op(packet.op)
        except ValueError:
            raise LinkError(ErrorCode.BAD_REQUEST, f"unknown opcode 0x{packet.op:02X}") from None
        if op not in (Op.SEND, Op.SEND_BINARY) and packet.body:
            raise LinkError(ErrorCode.BAD_REQUEST, f"{op.name} takes no body")
        if op is Op.PING:
            room = MAX_RESPONSE_PAYLOAD - PREFIX_SIZE
            return encode_packet(op.answer, packet.seq, json_body(self._health(), room))
        if op is Op.OPEN:
            return encode_packet(op.answer, packet.seq, self._open())
        if op in (Op.SEND, Op.SEND_BINARY):
            body = self._receive_fragment(packet.body, binary=op is Op.SEND_BINARY)
            return encode_packet(op.answer, packet.seq, body)
        if op is Op.POLL:
            return encode_packet(op.answer, packet.seq, self._next_fragment())
        if op is Op.CLOSE:
            self._inbound.reset()
            self.clear_outbound()
            self._events.append(SessionEnded())
            return encode_packet(op.answer, packet.seq)
        if op is Op.ABORT:
            dropped = self._inbound.reset()
            return encode_packet(op.answer, packet.seq, dropped.to_bytes(4, "big"))
        raise LinkError(ErrorCode.BAD_REQUEST, "ERROR is not a request")

    def _open(self) -> bytes:
        self._inbound.reset()
        self.clear_outbound()
        self._events.append(SessionRequested())
        info = {
            "link_version": LINK_VERSION,
            "max_message": self._inbound.max_size,
            "send_chunk": SEND_CHUNK,
            "poll_chunk": POLL_CHUNK,
            "binary": True,
        }
        return json.dumps(info, separators=(",", ":")).encode()

    def _receive_fragment(self, body: bytes, *, binary: bool) -> bytes:
        fragment = Fragment.parse(body)
        if self._inbound.in_progress and binary != self._inbound_binary:
            self._inbound.reset()
            raise LinkError(ErrorCode.OUT_OF_SEQUENCE, "message kind changed mid-message")
        message = self._inbound.add(fragment)
        self._inbound_binary = binary
        if message is None:
            return self._inbound.received.to_bytes(4, "big")
        if binary:
            self._events.append(BinaryReceived(message))
            return len(message).to_bytes(4, "big")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError as error:
            raise LinkError(ErrorCode.BAD_MESSAGE, f"message is not UTF-8: {error}") from None
        self._events.append(MessageReceived(text))
        return len(message).to_bytes(4, "big")

    def _next_fragment(self) -> bytes:
        if not self._outbound:
            return bytes((0,))
        head, binary = self._outbound[0]
        data = head[self._out_offset : self._out_offset + POLL_CHUNK]
        fragment = Fragment(len(head), self._out_offset, data)
        self._out_offset += len(data)
        self.queued_bytes -= len(data)
        if self._out_offset >= len(head):
            self._outbound.popleft()
            self._out_offset = 0
        flags = PollFlag.DATA | (PollFlag.MORE if self._outbound else 0)
        if binary:
            flags |= PollFlag.BINARY
        return bytes((flags,)) + fragment.encode()

    def _unsolicited_error(self, code: ErrorCode, message: str) -> None:
        self.errors += 1
        self._decoder.reset()
        self.drain_requested = True
        self._last = None
        self._to_send.append(
            encode_frame(Kind.RESPONSE, encode_error(UNSOLICITED_SEQ, code, message))
        )


# --- the host side ----------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """The guest's answer to the request in flight."""

    op: int
    body: bytes


@dataclass(frozen=True)
class Retry:
    """The request in flight (or its answer) was damaged: send it again."""

    reason: str


class RemoteError(Exception):
    """The guest answered ERROR to our request."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(f"{error_name(code)}: {message}")


class HostLink:
    """The host's side: numbers requests, matches answers, notices damage.

    >>> host = HostLink()
    >>> wire = host.request(Op.PING)
    >>> host.in_flight
    True
    """

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._seq = random.randrange(255)  # a fresh host does not look like a retransmission
        self._request: bytes | None = None
        self.stale_answers = 0
        """Answers to earlier requests (late after a retry) that were ignored."""

    @property
    def in_flight(self) -> bool:
        """Whether a request waits for its answer."""
        return self._request is not None

    def request(self, op: Op, body: bytes = b"") -> bytes:
        """Start an exchange; the frame to write.

        :raise RuntimeError: an exchange is already in flight.
        :raise FrameTooLarge: ``body`` does not fit one request frame.
        """
        if self._request is not None:
            raise RuntimeError("one exchange at a time: the previous request has no answer yet")
        self._seq = self._seq % 255 + 1  # 1..255; 0 marks unsolicited answers
        wire = encode_frame(Kind.REQUEST, encode_packet(op, self._seq, body))
        self._request = wire
        return wire

    def retransmit(self) -> bytes:
        """The frame of the request in flight, to send again (the decoder starts afresh)."""
        if self._request is None:
            raise RuntimeError("no request in flight")
        self._decoder.reset()
        return self._request

    def receive_data(self, data: bytes) -> Answer | Retry | None:
        """Take bytes from the guest; the answer, a reason to retry, or ``None`` (wait on).

        Bytes after the answer are dropped: nothing else may arrive within an exchange.

        :raise RemoteError: the guest answered ERROR to this request.
        """
        for item in self._decoder.feed(data):
            outcome = self._judge(item)
            if outcome is not None:
                if isinstance(outcome, Answer):
                    self.finish()
                return outcome
        return None

    def receive_timeout(self) -> Retry:
        """The bounded wait for an answer expired."""
        partial = self._decoder.abandon()
        return Retry(str(partial) if partial else "no answer")

    def finish(self) -> None:
        """End the exchange in flight (answered, or given up): the next starts clean."""
        self._request = None
        self._decoder.reset()

    def _judge(self, item: Frame | FrameError) -> Answer | Retry | None:
        if isinstance(item, FrameError):
            return Retry(f"damaged answer: {item}")
        if item.kind is not Kind.RESPONSE:
            return Retry("the guest sent a request frame")
        try:
            packet = parse_packet(item.payload)
        except LinkError as error:
            return Retry(str(error))
        sent_seq = self._request[7] if self._request is not None else None  # byte 6 is op
        if packet.seq == UNSOLICITED_SEQ and packet.op == ERROR_ANSWER:
            return Retry(f"the guest saw a damaged request: {_error_text(packet.body)}")
        if packet.seq != sent_seq:
            self.stale_answers += 1
            return None
        if packet.op == ERROR_ANSWER:
            self.finish()
            code = packet.body[0] if packet.body else 0
            raise RemoteError(code, packet.body[1:].decode("utf-8", "replace"))
        return Answer(packet.op, packet.body)


def _error_text(body: bytes) -> str:
    code = body[0] if body else 0
    return f"{error_name(code)}: {body[1:].decode('utf-8', 'replace')}"
