"""The agent's own RFC 6455 server side, sans-I/O: the opening handshake and frame parsing.

Client frames are built here by hand (:func:`client_frame`) or by the ``websockets``
library (the reference), and the server's frames are read back with ``websockets``'
parser, so a mistake made the same way on both sides of our code cannot pass.
"""

from __future__ import annotations

import base64
import doctest
import hashlib
import itertools
import os
import struct
import time
from collections.abc import Callable, Generator, Sequence
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.frames import Frame
from websockets.frames import Opcode as RefOpcode
from websockets.streams import StreamReader

from adare_guest.websocket import frames as websocket_frames
from adare_guest.websocket import handshake as websocket_handshake
from adare_guest.websocket.frames import (
    MAX_CLOSE_REASON,
    Close,
    CloseCode,
    DataMessage,
    FrameEvent,
    FrameParser,
    Opcode,
    Ping,
    Pong,
    ProtocolViolation,
    apply_mask,
    close_payload,
    encode_frame,
    frame_header,
    parse_close_payload,
)
from adare_guest.websocket.handshake import (
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    HandshakeError,
    HttpResponse,
    Request,
    RequestReader,
    accept_key,
    check_upgrade,
    switching_protocols,
)

FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
MASK = b"\x37\xfa\x21\x3d"
KEY = base64.b64encode(b"sixteen byte key").decode()
GOOD_HEADERS = [
    ("Host", "guest:18765"),
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", KEY),
    ("Sec-WebSocket-Version", "13"),
]


# --------------------------------------------------------------------------- helpers


def client_frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    rsv: int = 0,
    masked: bool = True,
    length: int | None = None,
    mask: bytes = MASK,
) -> bytes:
    """A client frame built by hand, byte by byte (``length`` overrides the header's)."""
    size = len(payload) if length is None else length
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    mask_bit = 0x80 if masked else 0
    if size < 126:
        header = bytes([first, mask_bit | size])
    elif size < 1 << 16:
        header = bytes([first, mask_bit | 126]) + struct.pack("!H", size)
    else:
        header = bytes([first, mask_bit | 127]) + struct.pack("!Q", size)
    if not masked:
        return header + payload
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def reference_frame(opcode: RefOpcode, data: bytes, fin: bool = True) -> bytes:
    """A masked client frame serialised by the websockets library."""
    return Frame(opcode, data, fin).serialize(mask=True)


def read_server_frame(data: bytes) -> Frame:
    """Parse one server frame with the websockets library (it insists on no mask)."""
    reader = StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    parser: Generator[None, None, Frame] = Frame.parse(
        reader.read_exact, mask=False, max_size=None, extensions=None
    )
    try:
        next(parser)
    except StopIteration as done:
        frame: Frame = done.value
        assert not reader.buffer, "bytes after the frame"
        return frame
    raise AssertionError("incomplete frame")


def feed_all(parser: FrameParser, data: bytes, step: int | None = None) -> list[FrameEvent]:
    events: list[FrameEvent] = []
    step = step or max(1, len(data))
    for start in range(0, len(data), step):
        events += parser.feed(data[start : start + step])
    return events


def violation(parser: FrameParser, data: bytes) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as caught:
        parser.feed(data)
    return caught.value


def request_bytes(headers: Sequence[tuple[str, str]], line: str = "GET /ws HTTP/1.1") -> bytes:
    lines = [line] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def read_request(data: bytes) -> Request:
    request = RequestReader().feed(data)
    assert request is not None
    return request


def refusal(data: bytes) -> HandshakeError:
    with pytest.raises(HandshakeError) as caught:
        check_upgrade(read_request(data))
    return caught.value


# --------------------------------------------------------------------------- handshake


def test_accept_key_is_rfc_6455s_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    expected = base64.b64encode(
        hashlib.sha1((KEY + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    ).decode()
    assert accept_key(KEY) == expected


def test_a_valid_upgrade_gives_the_key_and_a_101_without_extensions_or_subprotocol() -> None:
    asked = [
        *GOOD_HEADERS,
        ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
        ("Sec-WebSocket-Protocol", "chat"),
    ]
    request = read_request(request_bytes(asked, "GET /agent?x=1 HTTP/1.1"))
    assert request.path == "/agent?x=1"
    assert check_upgrade(request) == KEY
    answer = switching_protocols(KEY).decode("ascii")
    assert answer.endswith("\r\n\r\n")
    status, *headers = answer[:-4].split("\r\n")
    assert status == "HTTP/1.1 101 Switching Protocols"
    assert sorted(headers) == sorted(
        ["Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Accept: {accept_key(KEY)}"]
    )


def test_header_names_and_upgrade_tokens_are_case_insensitive_lists() -> None:
    headers = [
        ("host", "guest"),
        ("UPGRADE", "WebSocket"),
        ("connection", "keep-alive, UPGRADE"),
        ("sec-websocket-key", KEY),
        ("SEC-WEBSOCKET-VERSION", "13"),
    ]
    assert check_upgrade(read_request(request_bytes(headers))) == KEY


def test_the_head_may_arrive_byte_by_byte_and_what_follows_is_kept() -> None:
    data = request_bytes(GOOD_HEADERS) + b"\x81\x80first frame"
    reader = RequestReader()
    results = [reader.feed(data[i : i + 1]) for i in range(len(data))]
    head_end = len(request_bytes(GOOD_HEADERS))
    assert results[: head_end - 1] == [None] * (head_end - 1)
    assert isinstance(results[head_end - 1], Request)
    assert results[head_end:] == [None] * (len(data) - head_end)
    assert reader.leftover == b"\x81\x80first frame"


def test_a_head_over_16_kib_is_refused_with_431_before_it_ends() -> None:
    reader = RequestReader()
    assert reader.feed(b"GET / HTTP/1.1\r\nX-Filler: ") is None
    with pytest.raises(HandshakeError) as caught:
        for _ in range(MAX_HEAD_BYTES):
            reader.feed(b"a" * 100)
    assert caught.value.status == 431
    assert len(reader._buffer) < MAX_HEAD_BYTES + 100


def test_a_complete_head_over_16_kib_is_refused_too() -> None:
    big = request_bytes([*GOOD_HEADERS, ("X-Filler", "a" * MAX_HEAD_BYTES)])
    with pytest.raises(HandshakeError) as caught:
        RequestReader().feed(big)
    assert caught.value.status == 431


def test_a_head_of_exactly_the_limit_is_read() -> None:
    base = request_bytes([*GOOD_HEADERS, ("X-Filler", "")])
    exact = request_bytes([*GOOD_HEADERS, ("X-Filler", "a" * (MAX_HEAD_BYTES - len(base)))])
    assert len(exact) == MAX_HEAD_BYTES
    assert check_upgrade(read_request(exact)) == KEY


def test_more_than_128_headers_are_refused_with_431() -> None:
    filler = [(f"X-{n}", "1") for n in range(MAX_HEADERS - len(GOOD_HEADERS))]
    assert check_upgrade(read_request(request_bytes([*GOOD_HEADERS, *filler]))) == KEY
    with pytest.raises(HandshakeError) as caught:
        RequestReader().feed(request_bytes([*GOOD_HEADERS, *filler, ("X-last", "1")]))
    assert caught.value.status == 431


@pytest.mark.parametrize(
    "line",
    [
        "POST /ws HTTP/1.1",
        "get /ws HTTP/1.1",
        "GET /ws HTTP/1.0",
        "GET /ws HTTP/2",
        "GET  /ws HTTP/1.1",
        "GET /ws HTTP/1.1 extra",
        "GET ws HTTP/1.1",
        "GET http://host/ws HTTP/1.1",
        "GET /a\tb HTTP/1.1",
        "GET /caf\xe9 HTTP/1.1",
        "GET /a\x01 HTTP/1.1",
        "GET",
    ],
)
def test_a_request_line_other_than_get_path_http_1_1_is_a_400(line: str) -> None:
    with pytest.raises(HandshakeError) as caught:
        RequestReader().feed(request_bytes(GOOD_HEADERS, line))
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "raw_line",
    [
        b"No-Colon-Here",
        b"Bad Name: x",
        b": no name",
        b" folded: continuation",
        b"X-Ctl: a\x01b",
        b"X-Bare-LF: a\nb",
        b"X-Bare-CR: a\rb",
        b"X-Del: a\x7fb",
    ],
)
def test_a_malformed_header_line_is_a_400(raw_line: bytes) -> None:
    head = request_bytes(GOOD_HEADERS)[:-2] + raw_line + b"\r\n\r\n"
    with pytest.raises(HandshakeError) as caught:
        RequestReader().feed(head)
    assert caught.value.status == 400


def test_header_values_keep_every_byte_as_latin_1() -> None:
    head = request_bytes(GOOD_HEADERS)[:-2] + b"Authorization: Bearer s3cr\xc3\xa9t \r\n\r\n"
    (value,) = read_request(head).headers.get_all("authorization")
    assert value == "Bearer s3cr\xc3\xa9t"  # surrounding whitespace stripped, bytes kept
    assert value.encode("latin-1") == b"Bearer s3cr\xc3\xa9t"


def without(name: str) -> list[tuple[str, str]]:
    return [(key, value) for key, value in GOOD_HEADERS if key != name]


def replaced(name: str, *values: str) -> list[tuple[str, str]]:
    return without(name) + [(name, value) for value in values]


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        (without("Host"), "Host"),
        (replaced("Host", "a", "b"), "Host"),
        (without("Upgrade"), "Upgrade"),
        (replaced("Upgrade", "h2c"), "Upgrade"),
        (replaced("Upgrade", "websockets"), "Upgrade"),
        (without("Connection"), "Connection"),
        (replaced("Connection", "keep-alive"), "Connection"),
        (replaced("Connection", "upgraded"), "Connection"),
        (without("Sec-WebSocket-Version"), "Sec-WebSocket-Version"),
        (without("Sec-WebSocket-Key"), "Sec-WebSocket-Key"),
        (replaced("Sec-WebSocket-Key", KEY, KEY), "Sec-WebSocket-Key"),
        (replaced("Sec-WebSocket-Key", "not base64!"), "Sec-WebSocket-Key"),
        (replaced("Sec-WebSocket-Key", base64.b64encode(b"15 bytes only..").decode()), "16"),
        (replaced("Sec-WebSocket-Key", base64.b64encode(b"seventeen bytes!!").decode()), "16"),
        (replaced("Sec-WebSocket-Key", KEY.rstrip("=")), "Sec-WebSocket-Key"),
    ],
)
def test_a_bad_upgrade_is_a_400_naming_the_header(
    headers: list[tuple[str, str]], fragment: str
) -> None:
    refused = refusal(request_bytes(headers))
    assert refused.status == 400
    assert fragment in refused.reason
    response = refused.response().serialize()
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert response.endswith(b"\r\n\r\n" + refused.reason.encode() + b"\n")


@pytest.mark.parametrize("versions", [("8",), ("14",), ("13, 8",), ("13", "13")])
def test_another_websocket_version_is_a_426_naming_13(versions: tuple[str, ...]) -> None:
    refused = refusal(request_bytes(replaced("Sec-WebSocket-Version", *versions)))
    assert refused.status == 426
    assert ("Sec-WebSocket-Version", "13") in refused.headers
    head = refused.response().serialize().split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 426 Upgrade Required"
    assert b"Sec-WebSocket-Version: 13" in head[1:]


def test_an_http_response_has_its_headers_a_length_and_its_body() -> None:
    response = HttpResponse.text(401, "no token", [("WWW-Authenticate", "Bearer")])
    head, body = response.serialize().split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 401 Unauthorized"
    assert b"WWW-Authenticate: Bearer" in lines and b"Content-Length: 9" in lines
    assert b"Connection: close" in lines and body == b"no token\n"


# --------------------------------------------------------------------------- frames


def test_apply_mask_matches_a_byte_by_byte_xor_and_undoes_itself() -> None:
    for size in [*range(10), 125, 126, 4097, (1 << 20) - 1, (1 << 20) + 3, (3 << 20) + 1]:
        data = os.urandom(size)
        masked = apply_mask(data, MASK)
        assert all(masked[i] == data[i] ^ MASK[i % 4] for i in range(min(size, 64)))
        if size > 64:  # the last bytes too, past every chunk boundary
            assert all(masked[i] == data[i] ^ MASK[i % 4] for i in range(size - 64, size))
        assert apply_mask(masked, MASK) == data


def best_of_three(work: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def test_apply_mask_works_on_the_whole_payload_not_byte_by_byte() -> None:
    """Measured against sha256 of the same bytes, so a loaded machine slows both: here
    whole-payload XOR is ~5-10x sha256's time, a Python loop over the bytes ~50-100x."""
    data = os.urandom(16 << 20)
    masking = best_of_three(lambda: apply_mask(data, MASK))
    hashing = best_of_three(lambda: hashlib.sha256(data).digest())
    assert masking < 25 * hashing, f"{masking:.3f} s to mask, {hashing:.3f} s to hash"


@pytest.mark.parametrize("opcode", [Opcode.TEXT, Opcode.BINARY])
@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_a_masked_message_of_any_length_encoding_is_read(opcode: Opcode, size: int) -> None:
    payload = os.urandom(size) if opcode == Opcode.BINARY else b"x" * size
    expected = payload if opcode == Opcode.BINARY else payload.decode()
    frame = reference_frame(RefOpcode(opcode), payload)
    assert FrameParser(max_message=1 << 20).feed(frame) == [DataMessage(expected)]
    if size <= 65536:  # split anywhere, even one byte at a time
        assert feed_all(FrameParser(max_message=1 << 20), frame, 1) == [DataMessage(expected)]


def test_server_frames_are_unmasked_and_read_back_by_websockets() -> None:
    for size in [0, 125, 126, 65535, 65536, 70000]:
        payload = os.urandom(size)
        frame = read_server_frame(encode_frame(Opcode.BINARY, payload))
        assert frame.opcode == RefOpcode.BINARY and frame.fin and frame.data == payload
    partial = read_server_frame(encode_frame(Opcode.TEXT, b"part", fin=False))
    assert partial.opcode == RefOpcode.TEXT and not partial.fin
    assert frame_header(Opcode.BINARY, 65536)[1] == 127  # no mask bit: 0x80 clear
    close = read_server_frame(encode_frame(Opcode.CLOSE, close_payload(1001, "bye")))
    assert close.opcode == RefOpcode.CLOSE and close.data == b"\x03\xe9bye"


def test_several_frames_in_one_feed_come_out_in_order() -> None:
    data = (
        client_frame(Opcode.TEXT, b"one")
        + client_frame(Opcode.PING, b"p")
        + client_frame(Opcode.BINARY, b"\x00two")
        + client_frame(Opcode.PONG, b"q")
    )
    assert FrameParser(max_message=100).feed(data) == [
        DataMessage("one"),
        Ping(b"p"),
        DataMessage(b"\x00two"),
        Pong(b"q"),
    ]


def test_events_are_equal_only_to_events_of_their_kind_with_equal_fields() -> None:
    assert Ping(b"x") == Ping(b"x") and Ping(b"x") != Pong(b"x") and Ping(b"x") != Ping(b"y")
    assert DataMessage("a") != DataMessage(b"a") and Close(1000, "") != Close(1001, "")
    assert len({Ping(b"x"), Ping(b"x"), Pong(b"x")}) == 2
    assert repr(Close(1000, "bye")) == "Close(code=1000, reason='bye')"


def test_fragments_are_joined_and_control_frames_may_come_between() -> None:
    euro = "€".encode()  # three bytes, split across two fragments
    data = (
        client_frame(Opcode.TEXT, b"price: " + euro[:1], fin=False)
        + client_frame(Opcode.PING, b"mid")
        + client_frame(Opcode.CONTINUATION, euro[1:], fin=False)
        + client_frame(Opcode.CONTINUATION, b" 5", fin=True)
        + client_frame(Opcode.BINARY, b"a", fin=False)
        + client_frame(Opcode.CONTINUATION, b"", fin=False)
        + client_frame(Opcode.CONTINUATION, b"b", fin=True)
    )
    for step in (None, 1, 3):
        events = feed_all(FrameParser(max_message=100), data, step)
        assert events == [Ping(b"mid"), DataMessage("price: € 5"), DataMessage(b"ab")]


def test_fragments_made_by_websockets_are_joined() -> None:
    data = (
        reference_frame(RefOpcode.BINARY, b"ab", fin=False)
        + reference_frame(RefOpcode.CONT, b"cd", fin=False)
        + reference_frame(RefOpcode.CONT, b"ef")
    )
    assert FrameParser(max_message=6).feed(data) == [DataMessage(b"abcdef")]


def test_an_unmasked_client_frame_is_a_1002() -> None:
    assert violation(FrameParser(max_message=100), client_frame(1, b"hi", masked=False)).code == (
        1002
    )
    # Found from the first two bytes, before any payload arrives.
    header_only = client_frame(Opcode.BINARY, b"x" * 50, masked=False)[:2]
    assert violation(FrameParser(max_message=100), header_only).code == 1002


@pytest.mark.parametrize("rsv", [1, 2, 4, 7])
def test_a_reserved_bit_is_a_1002(rsv: int) -> None:
    caught = violation(FrameParser(max_message=100), client_frame(Opcode.TEXT, b"x", rsv=rsv))
    assert caught.code == 1002 and "reserved" in caught.reason


@pytest.mark.parametrize("opcode", [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF])
def test_an_unknown_opcode_is_a_1002(opcode: int) -> None:
    caught = violation(FrameParser(max_message=100), client_frame(opcode, b"x"))
    assert caught.code == 1002 and "opcode" in caught.reason


@pytest.mark.parametrize("opcode", [Opcode.PING, Opcode.PONG, Opcode.CLOSE])
def test_a_control_frame_over_125_bytes_or_fragmented_is_a_1002(opcode: Opcode) -> None:
    payload = b"\x03\xe8" + b"x" * 123 if opcode == Opcode.CLOSE else b"x" * 125
    assert FrameParser(max_message=10).feed(client_frame(opcode, payload))  # 125: fine
    too_long = client_frame(opcode, payload + b"x")
    assert violation(FrameParser(max_message=10), too_long[:2]).code == 1002
    fragmented = client_frame(opcode, b"", fin=False)
    assert violation(FrameParser(max_message=10), fragmented).code == 1002


def test_a_continuation_without_a_message_is_a_1002() -> None:
    caught = violation(FrameParser(max_message=100), client_frame(Opcode.CONTINUATION, b"x"))
    assert caught.code == 1002 and "continuation" in caught.reason
    after_whole = client_frame(Opcode.TEXT, b"a") + client_frame(Opcode.CONTINUATION, b"b")
    assert violation(FrameParser(max_message=100), after_whole).code == 1002


@pytest.mark.parametrize("second", [Opcode.TEXT, Opcode.BINARY])
def test_a_new_message_inside_a_fragmented_one_is_a_1002(second: Opcode) -> None:
    data = client_frame(Opcode.BINARY, b"a", fin=False) + client_frame(second, b"b")
    caught = violation(FrameParser(max_message=100), data)
    assert caught.code == 1002 and "fragmented" in caught.reason


def test_a_64_bit_length_with_its_top_bit_set_is_a_1002() -> None:
    header = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 1 << 63)
    assert violation(FrameParser(max_message=1 << 62), header).code == 1002


def test_a_message_over_the_limit_is_a_1009_from_its_header_alone() -> None:
    parser = FrameParser(max_message=1000)
    assert parser.feed(client_frame(Opcode.BINARY, b"x" * 1000)) == [DataMessage(b"x" * 1000)]
    header = client_frame(Opcode.BINARY, b"x" * 1001)[:4]  # 2 bytes + 16-bit length
    caught = violation(parser, header)
    assert caught.code == 1009 and "1000" in caught.reason
    huge = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 1 << 40)
    assert violation(FrameParser(max_message=1000), huge).code == 1009


def test_fragments_adding_up_over_the_limit_are_a_1009_at_the_fragment_that_crosses() -> None:
    parser = FrameParser(max_message=1000)
    assert parser.feed(client_frame(Opcode.TEXT, b"x" * 600, fin=False)) == []
    assert parser.feed(client_frame(Opcode.CONTINUATION, b"x" * 400, fin=False)) == []
    assert violation(parser, client_frame(Opcode.CONTINUATION, b"x", fin=True)[:2]).code == 1009


def test_invalid_utf_8_text_is_a_1007() -> None:
    caught = violation(FrameParser(max_message=100), client_frame(Opcode.TEXT, b"ok \xff"))
    assert caught.code == 1007


def test_invalid_utf_8_is_found_in_the_fragment_that_has_it() -> None:
    parser = FrameParser(max_message=100)
    assert parser.feed(client_frame(Opcode.TEXT, "é".encode()[:1], fin=False)) == []
    # A continuation byte was expected: the fragment (not the end) gives the 1007.
    assert violation(parser, client_frame(Opcode.CONTINUATION, b"a", fin=False)).code == 1007


def test_text_ending_inside_a_character_is_a_1007() -> None:
    parser = FrameParser(max_message=100)
    assert parser.feed(client_frame(Opcode.TEXT, b"abc" + "€".encode()[:2], fin=False)) == []
    assert violation(parser, client_frame(Opcode.CONTINUATION, b"", fin=True)).code == 1007


def test_binary_messages_are_not_checked_for_utf_8() -> None:
    parser = FrameParser(max_message=100)
    assert parser.feed(client_frame(Opcode.BINARY, b"\xff\xfe")) == [DataMessage(b"\xff\xfe")]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", Close(1005, "")),
        (b"\x03\xe8", Close(1000, "")),
        (b"\x03\xe9going", Close(1001, "going")),
        (b"\x0b\xb8" + "ça".encode(), Close(3000, "ça")),
        (b"\x13\x87", Close(4999, "")),
        (b"\x03\xf4", Close(1012, "")),
    ],
)
def test_a_close_frame_gives_its_code_and_reason(payload: bytes, expected: Close) -> None:
    parser = FrameParser(max_message=100)
    assert parser.feed(client_frame(Opcode.CLOSE, payload)) == [expected]
    assert parser.closed


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535])
def test_a_close_code_not_allowed_on_the_wire_is_a_1002(code: int) -> None:
    caught = violation(FrameParser(max_message=100), client_frame(8, struct.pack("!H", code)))
    assert caught.code == 1002 and str(code) in caught.reason


def test_a_one_byte_close_payload_is_a_1002_and_a_bad_reason_a_1007() -> None:
    assert violation(FrameParser(max_message=100), client_frame(8, b"\x03")).code == 1002
    bad_reason = client_frame(Opcode.CLOSE, b"\x03\xe8\xc3")
    assert violation(FrameParser(max_message=100), bad_reason).code == 1007


def test_what_follows_a_close_frame_is_ignored() -> None:
    parser = FrameParser(max_message=100)
    data = client_frame(Opcode.CLOSE, b"\x03\xe8") + client_frame(Opcode.TEXT, b"late")
    assert parser.feed(data) == [Close(1000, "")]
    assert parser.feed(b"\x00garbage that is no frame") == [] and parser.buffered == 0


def test_after_a_violation_every_feed_raises_it_again() -> None:
    parser = FrameParser(max_message=100)
    first = violation(parser, client_frame(3, b""))
    assert violation(parser, client_frame(Opcode.TEXT, b"fine")) is first
    assert parser.buffered == 0


def test_close_payload_cuts_the_reason_on_a_character_boundary() -> None:
    payload = close_payload(1000, "€" * 60)  # 180 bytes of UTF-8; 123 = 41 whole euros
    assert len(payload) - 2 <= MAX_CLOSE_REASON and len(payload) == 2 + 123
    assert parse_close_payload(payload) == Close(1000, "€" * 41)
    shifted = close_payload(1000, "a" + "€" * 60)  # byte 123 is inside the 41st euro
    assert len(shifted) == 2 + 121
    assert parse_close_payload(shifted) == Close(1000, "a" + "€" * 40)
    assert close_payload(CloseCode.NO_STATUS) == b""
    assert close_payload(1002, "bad") == b"\x03\xeabad"


@pytest.mark.parametrize("module", [websocket_frames, websocket_handshake])
def test_docstring_examples_hold(module: ModuleType) -> None:
    outcome = doctest.testmod(module)
    assert outcome.attempted > 0 and outcome.failed == 0


# --------------------------------------------------------------------------- fuzz

SMALL_LIMIT = 300


@FUZZ
@given(data=st.binary(max_size=4000), splits=st.lists(st.integers(1, 600), max_size=20))
def test_random_bytes_raise_only_protocol_violations_and_stay_bounded(
    data: bytes, splits: list[int]
) -> None:
    parser = FrameParser(max_message=SMALL_LIMIT)
    pieces, rest = [], data
    for size in splits:
        pieces.append(rest[:size])
        rest = rest[size:]
    pieces.append(rest)
    try:
        for piece in pieces:
            for event in parser.feed(piece):
                assert isinstance(event, (DataMessage, Ping, Pong, Close))
            assert parser.buffered < parser.max_buffered
    except ProtocolViolation as exc:
        assert exc.code in (1002, 1007, 1009)


frames = st.builds(
    client_frame,
    st.sampled_from([0, 1, 2, 8, 9, 10, 3, 0xB]),
    st.binary(max_size=200),
    fin=st.booleans(),
    rsv=st.sampled_from([0, 0, 0, 0, 1, 4]),
    masked=st.sampled_from([True, True, True, False]),
    mask=st.binary(min_size=4, max_size=4),
)


@FUZZ
@given(st.lists(frames, max_size=12), st.integers(1, 64))
def test_random_frames_raise_only_protocol_violations_and_stay_bounded(
    stream: list[bytes], step: int
) -> None:
    parser = FrameParser(max_message=SMALL_LIMIT)
    data = b"".join(stream)
    try:
        for start in range(0, len(data), step):
            parser.feed(data[start : start + step])
            assert parser.buffered < parser.max_buffered
    except ProtocolViolation as exc:
        assert exc.code in (1002, 1007, 1009)


@FUZZ
@given(
    text=st.text(max_size=300),
    cuts=st.lists(st.integers(0, 1200), max_size=6),
    step=st.integers(1, 50),
)
def test_any_fragmentation_of_a_text_message_gives_it_back(
    text: str, cuts: list[int], step: int
) -> None:
    encoded = text.encode("utf-8")
    bounds = sorted({min(cut, len(encoded)) for cut in cuts} | {0, len(encoded)})
    pieces = [encoded[a:b] for a, b in itertools.pairwise(bounds)] or [b""]
    data = b"".join(
        client_frame(
            Opcode.TEXT if index == 0 else Opcode.CONTINUATION,
            piece,
            fin=index == len(pieces) - 1,
        )
        for index, piece in enumerate(pieces)
    )
    assert feed_all(FrameParser(max_message=1200), data, step) == [DataMessage(text)]


@FUZZ
@given(data=st.binary(max_size=3000), step=st.integers(1, 700))
def test_random_handshake_bytes_raise_only_handshake_errors_and_stay_bounded(
    data: bytes, step: int
) -> None:
    reader = RequestReader(max_head_bytes=1024, max_headers=8)
    try:
        for start in range(0, len(data), step):
            request = reader.feed(data[start : start + step])
            assert len(reader._buffer) < 1024 + step
            if request is not None:
                check_upgrade(request)
                break
    except HandshakeError as exc:
        assert exc.status in (400, 426, 431)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["Host", "Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version"]
            ),
            st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=30),
        ),
        max_size=8,
    )
)
def test_random_upgrade_headers_raise_only_handshake_errors(
    headers: list[tuple[str, str]],
) -> None:
    try:
        key = check_upgrade(read_request(request_bytes([*GOOD_HEADERS, *headers])))
    except HandshakeError as exc:
        assert exc.status in (400, 426)
    else:
        assert len(base64.b64decode(key, validate=True)) == 16
