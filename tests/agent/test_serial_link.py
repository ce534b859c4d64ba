"""The serial link layer, sans-I/O: a HostLink and a GuestLink talking through bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adare_guest.protocol import ToolCall, encode_message, parse_message
from adare_guest.serial.link import (
    MAX_HOST_MESSAGE,
    POLL_CHUNK,
    SEND_CHUNK,
    Answer,
    ErrorCode,
    Fragment,
    GuestLink,
    HostLink,
    LinkError,
    MessageReceived,
    Op,
    PollFlag,
    Reassembler,
    RemoteError,
    Retry,
    SessionEnded,
    SessionRequested,
    fragments,
    json_body,
)
from frame_codec import MAX_RESPONSE_PAYLOAD, FrameDecoder, Kind, decode_frame, encode_frame

HEALTH = {
    "version": "0.1.0",
    "listen": "0.0.0.0:18765",
    "listening": True,
    "uptime": 1.5,
    "last_error": None,
}


def make_guest(**kwargs: Any) -> GuestLink:
    return GuestLink(lambda: dict(HEALTH), **kwargs)


def exchange(host: HostLink, guest: GuestLink, op: Op, body: bytes = b"") -> Answer:
    guest.receive_data(host.request(op, body))
    outcome = host.receive_data(guest.data_to_send())
    assert isinstance(outcome, Answer), outcome
    assert outcome.op == op.answer
    return outcome


def send_message(host: HostLink, guest: GuestLink, data: bytes) -> list[int]:
    acks = []
    for fragment in fragments(data, SEND_CHUNK):
        answer = exchange(host, guest, Op.SEND, fragment.encode())
        acks.append(int.from_bytes(answer.body, "big"))
    return acks


def poll_message(host: HostLink, guest: GuestLink) -> tuple[bytes | None, int]:
    """Poll until one whole message arrived; (message, polls)."""
    reassembler = Reassembler(1 << 30)
    for polls in range(1, 100_000):
        body = exchange(host, guest, Op.POLL).body
        if not body[0] & PollFlag.DATA:
            return None, polls
        message = reassembler.add(Fragment.parse(body[1:]))
        if message is not None:
            return message, polls
    raise AssertionError("message never completed")


def test_ping_answers_with_the_health_report() -> None:
    answer = exchange(HostLink(), make_guest(), Op.PING)
    assert json.loads(answer.body) == HEALTH


def test_a_large_protocol_message_is_fragmented_and_reassembled() -> None:
    host, guest = HostLink(), make_guest()
    call = ToolCall("execute_shell", {"shell_command": "echo " + "x" * 100_000})
    text = encode_message(call)
    acks = send_message(host, guest, text.encode())
    assert len(acks) == -(-len(text) // SEND_CHUNK) > 40
    assert acks[-1] == len(text) and acks == sorted(acks)
    events = guest.events_received()
    assert len(events) == 1 and isinstance(events[0], MessageReceived)
    assert parse_message(events[0].text) == call


def test_queued_messages_come_back_in_polled_fragments_in_order() -> None:
    host, guest = HostLink(), make_guest()
    big = json.dumps({"data": "y" * 5000}).encode()
    guest.queue_message(big.decode())
    guest.queue_message('{"small":1}')
    assert guest.queued_bytes == len(big) + 11
    message, polls = poll_message(host, guest)
    assert message == big and polls == -(-len(big) // POLL_CHUNK)
    assert poll_message(host, guest)[0] == b'{"small":1}'
    assert poll_message(host, guest) == (None, 1)
    assert guest.queued_bytes == 0


def test_more_flag_says_whether_anything_waits_after_the_fragment() -> None:
    host, guest = HostLink(), make_guest()
    guest.queue_message("a")
    guest.queue_message("b")
    first = exchange(host, guest, Op.POLL).body[0]
    second = exchange(host, guest, Op.POLL).body[0]
    assert first == PollFlag.DATA | PollFlag.MORE and second == PollFlag.DATA


def test_every_response_fits_the_response_frame_limit() -> None:
    host, guest = HostLink(), make_guest()
    guest.queue_message("z" * 10_000)
    while exchange(host, guest, Op.POLL).body[0]:
        pass
    decoder = FrameDecoder()  # the limit is enforced by the decoder itself
    guest.queue_message("q" * 3000)
    guest.receive_data(host.request(Op.POLL))
    wire = guest.data_to_send()
    frame = decode_frame(wire)
    assert len(frame.payload) == MAX_RESPONSE_PAYLOAD
    assert decoder.feed(wire) == [frame]


def test_a_retransmitted_request_gets_the_same_answer_and_is_not_repeated() -> None:
    host, guest = HostLink(), make_guest()
    guest.queue_message("only once")
    wire = host.request(Op.POLL)
    guest.receive_data(wire)
    first = guest.data_to_send()
    guest.receive_data(host.retransmit())
    assert guest.data_to_send() == first
    assert isinstance(host.receive_data(first), Answer)
    assert exchange(host, guest, Op.POLL).body == bytes((0,))


def test_a_retransmitted_last_fragment_delivers_the_message_once() -> None:
    host, guest = HostLink(), make_guest()
    wire = host.request(Op.SEND, Fragment(5, 0, b'"abc"').encode())
    guest.receive_data(wire)
    guest.receive_data(wire)
    assert guest.events_received() == [MessageReceived('"abc"')]


def test_abort_drops_a_half_sent_message_and_a_new_one_starts_clean() -> None:
    host, guest = HostLink(), make_guest()
    exchange(host, guest, Op.SEND, Fragment(10_000, 0, b"x" * 100).encode())
    answer = exchange(host, guest, Op.ABORT)
    assert int.from_bytes(answer.body, "big") == 100
    assert send_message(host, guest, b'{"a":1}') == [7]
    assert guest.events_received() == [MessageReceived('{"a":1}')]


def test_fragments_out_of_order_are_refused_and_drop_the_message() -> None:
    host, guest = HostLink(), make_guest()
    exchange(host, guest, Op.SEND, Fragment(300, 0, b"x" * 100).encode())
    guest.receive_data(host.request(Op.SEND, Fragment(300, 150, b"x" * 100).encode()))
    with pytest.raises(RemoteError, match="OUT_OF_SEQUENCE: fragment at offset 150, expected 100"):
        host.receive_data(guest.data_to_send())
    guest.receive_data(host.request(Op.SEND, Fragment(300, 100, b"x" * 100).encode()))
    with pytest.raises(RemoteError, match="expected 0"):
        host.receive_data(guest.data_to_send())


def test_a_message_over_16_mib_is_refused_at_its_first_fragment() -> None:
    host, guest = HostLink(), make_guest()
    guest.receive_data(host.request(Op.SEND, Fragment(MAX_HOST_MESSAGE + 1, 0, b"{").encode()))
    with pytest.raises(RemoteError) as caught:
        host.receive_data(guest.data_to_send())
    assert caught.value.code == ErrorCode.TOO_LARGE


def test_a_message_that_is_not_utf8_is_refused() -> None:
    host, guest = HostLink(), make_guest()
    guest.receive_data(host.request(Op.SEND, Fragment(2, 0, b"\xff\xfe").encode()))
    with pytest.raises(RemoteError, match="BAD_MESSAGE"):
        host.receive_data(guest.data_to_send())
    assert guest.events_received() == []


@pytest.mark.parametrize(
    ("op", "body", "message"),
    [
        (0x42, b"", "unknown opcode 0x42"),
        (Op.PING, b"x", "PING takes no body"),
        (Op.SEND, b"short", "fragment body of 5 bytes"),
        (Op.ERROR, b"", "not a request"),
    ],
)
def test_bad_requests_get_an_error_answer_with_their_seq(
    op: int, body: bytes, message: str
) -> None:
    host, guest = HostLink(), make_guest()
    guest.receive_data(host.request(op, body))  # type: ignore[arg-type]
    with pytest.raises(RemoteError, match=message):
        host.receive_data(guest.data_to_send())
    assert not host.in_flight
    exchange(host, guest, Op.PING)


def test_noise_gets_one_unsolicited_error_and_asks_for_a_drain() -> None:
    host, guest = HostLink(), make_guest()
    guest.receive_data(b"\x00garbage from a confused peer" * 50)
    assert guest.take_drain_request() and not guest.take_drain_request()
    wire = host.request(Op.PING)
    outcome = host.receive_data(guest.data_to_send())
    assert isinstance(outcome, Retry) and "MALFORMED_FRAME" in outcome.reason
    guest.receive_data(host.retransmit())
    assert isinstance(host.receive_data(guest.data_to_send()), Answer)
    assert wire  # the request itself was never damaged


def test_a_cut_off_frame_is_answered_partial_after_the_wait_and_the_next_is_clean() -> None:
    host, guest = HostLink(), make_guest()
    wire = host.request(Op.PING)
    guest.receive_data(wire[:5])
    assert guest.frame_pending and guest.data_to_send() == b""
    partial = guest.receive_timeout()
    assert partial is not None and partial.received == 5
    outcome = host.receive_data(guest.data_to_send())
    assert isinstance(outcome, Retry) and "PARTIAL_FRAME" in outcome.reason
    assert guest.take_drain_request()
    guest.receive_data(host.retransmit())
    assert isinstance(host.receive_data(guest.data_to_send()), Answer)
    assert guest.receive_timeout() is None


def test_an_over_limit_header_is_answered_at_once() -> None:
    guest = make_guest()
    guest.receive_data(b"DV\x01\x01\xff\xff")
    frame = decode_frame(guest.data_to_send())
    assert frame.payload[:3] == bytes((Op.ERROR.answer, 0, ErrorCode.TOO_LARGE))


def test_a_response_frame_sent_to_the_guest_is_refused() -> None:
    guest = make_guest()
    guest.receive_data(encode_frame(Kind.RESPONSE, b"\x81\x01"))
    assert decode_frame(guest.data_to_send()).payload[2] == ErrorCode.BAD_REQUEST


def test_the_host_ignores_a_late_answer_to_an_earlier_request() -> None:
    host, guest = HostLink(), make_guest()
    guest.receive_data(host.request(Op.PING))
    late = guest.data_to_send()
    host.finish()  # the host gave up on that exchange
    guest.receive_data(host.request(Op.POLL))
    assert host.receive_data(late) is None and host.stale_answers == 1
    outcome = host.receive_data(guest.data_to_send())
    assert isinstance(outcome, Answer) and outcome.op == Op.POLL.answer


def test_the_host_refuses_a_second_request_while_one_is_in_flight() -> None:
    host = HostLink()
    host.request(Op.PING)
    with pytest.raises(RuntimeError, match="one exchange at a time"):
        host.request(Op.POLL)


def test_open_requests_a_new_session_and_drops_queued_messages() -> None:
    host, guest = HostLink(), make_guest()
    guest.queue_message("stale")
    exchange(host, guest, Op.SEND, Fragment(100, 0, b"x").encode())
    info = json.loads(exchange(host, guest, Op.OPEN).body)
    assert info["max_message"] == MAX_HOST_MESSAGE and info["send_chunk"] == SEND_CHUNK
    assert guest.events_received() == [SessionRequested()]
    assert guest.queued_bytes == 0
    assert send_message(host, guest, b"{}") == [2]  # the half message was dropped too


def test_the_outbound_queue_is_bounded() -> None:
    guest = make_guest(max_queued=100)
    guest.queue_message("a" * 60)
    with pytest.raises(LinkError, match="dropping a 60-byte message"):
        guest.queue_message("b" * 60)


def test_the_health_report_is_trimmed_to_one_frame() -> None:
    report = dict(HEALTH, last_error="E" * 5000)
    body = json_body(report, MAX_RESPONSE_PAYLOAD - 2)
    assert len(body) <= MAX_RESPONSE_PAYLOAD - 2
    assert json.loads(body)["last_error"].startswith("EEEE")
    guest = GuestLink(lambda: report)
    guest.receive_data(HostLink().request(Op.PING))
    assert len(decode_frame(guest.data_to_send()).payload) <= MAX_RESPONSE_PAYLOAD


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_any_request_payload_gets_exactly_one_well_formed_answer(payload: bytes) -> None:
    guest = make_guest()
    guest.queue_message("pending")
    guest.receive_data(encode_frame(Kind.REQUEST, payload))
    frames = FrameDecoder().feed(guest.data_to_send())
    assert len(frames) == 1
    frame = frames[0]
    assert not isinstance(frame, Exception) and frame.kind is Kind.RESPONSE
    assert frame.payload[1] == (payload[1] if len(payload) > 1 else 0)


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=1, max_size=20_000), st.integers(1, SEND_CHUNK))
def test_reassembly_restores_any_message_from_any_chunking(data: bytes, chunk: int) -> None:
    reassembler = Reassembler(len(data))
    results = [reassembler.add(f) for f in fragments(data, chunk)]
    assert results[-1] == data and all(r is None for r in results[:-1])
    assert not reassembler.in_progress


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.builds(
                lambda op, seq, body: encode_frame(Kind.REQUEST, bytes((op, seq)) + body),
                st.sampled_from([*Op, 0x00, 0x42]),
                st.integers(0, 255),
                st.binary(max_size=64),
            ),
        ),
        max_size=20,
    )
)
def test_any_byte_stream_gets_only_well_formed_answers_and_bounded_state(
    chunks: list[bytes],
) -> None:
    guest = make_guest()
    decoder = FrameDecoder()
    for chunk in chunks:
        guest.receive_data(chunk)
        for item in decoder.feed(guest.data_to_send()):
            assert not isinstance(item, Exception) and item.kind is Kind.RESPONSE
        guest.take_drain_request()
        guest.events_received()
    guest.receive_timeout()
    assert not guest.frame_pending
    assert all(not isinstance(i, Exception) for i in decoder.feed(guest.data_to_send()))


def test_close_ends_the_session_and_drops_what_was_queued() -> None:
    host, guest = HostLink(), make_guest()
    guest.queue_message("result nobody will poll")
    assert exchange(host, guest, Op.CLOSE).body == b""
    assert guest.events_received() == [SessionEnded()]
    assert guest.queued_bytes == 0
