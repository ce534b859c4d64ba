"""The wire model: exact envelopes out, strict validation in."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from adare_guest.protocol import (
    MAX_HOST_MESSAGE,
    Connect,
    Event,
    EventType,
    Message,
    MessageType,
    Ping,
    Pong,
    ProtocolError,
    Status,
    ToolCall,
    ToolResult,
    encode_message,
    is_large_message,
    iter_encode_message,
    new_id,
    parse_message,
)

EXAMPLES: list[Message] = [
    ToolCall("execute_shell", {"shell_command": "echo hi"}),
    ToolResult("abc", True, {"status": "success"}, None),
    ToolResult("abc", False, None, "unknown tool 'x'"),
    Event(EventType.PROGRESS, {"call_id": "abc", "percent": 50}),
    Status("busy", {"load": 1}),
    Connect({"version": "0.1.0"}),
    Ping(),
    Pong("ping-id"),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_with_exactly_the_design_keys(
    msg: Message, design_envelopes: dict[str, set[str]]
) -> None:
    text = encode_message(msg)
    raw = json.loads(text)
    assert set(raw) == design_envelopes[raw["type"]]
    assert parse_message(text) == msg
    assert parse_message(raw) == msg


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_piecewise_encoding_gives_the_same_text(msg: Message) -> None:
    assert "".join(iter_encode_message(msg)) == encode_message(msg)


def test_big_results_are_large_messages_and_encode_identically() -> None:
    snapshot = {
        f"/f{n}\n|\udcff": {"type": "file", "timestamps": {"m": n / 3}} for n in range(3000)
    }
    msg = ToolResult("i", True, {"snapshot": snapshot, "errors": [], "x": {}}, None)
    assert is_large_message(msg) and not is_large_message(EXAMPLES[1])
    assert "".join(iter_encode_message(msg)) == encode_message(msg)


def test_event_types_are_exactly_the_design_list(
    design_envelopes: dict[str, set[str]], design_event_types: set[str]
) -> None:
    assert {e.value for e in EventType} == design_event_types
    assert {t.value for t in MessageType} == set(design_envelopes)


def test_new_ids_are_unique_uuid4_strings() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 36 and i[14] == "4" for i in ids)


def test_non_utf8_names_survive_as_surrogate_escapes_in_ascii_json() -> None:
    name = os.fsdecode(b"/tmp/caf\xe9|\n")
    text = encode_message(ToolResult("i", True, {"snapshot": {name: {}}}, None))
    assert text.isascii()
    back = parse_message(text)
    assert isinstance(back, ToolResult) and back.result is not None
    assert [os.fsencode(k) for k in back.result["snapshot"]] == [b"/tmp/caf\xe9|\n"]


def _call(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "type": "tool_call",
        "id": "id-1",
        "timestamp": 1.5,
        "tool": "get_status",
        "params": {},
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not ...}


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps(_call(type="teleport")), "unknown message type 'teleport'"),
        (json.dumps(_call(extra=1)), "unexpected keys ['extra']"),
        (json.dumps(_call(params=...)), "missing keys ['params']"),
        (json.dumps(_call(id=7)), "'id' must be a non-empty string"),
        (json.dumps(_call(id="")), "'id' must be a non-empty string"),
        (json.dumps(_call(timestamp="now")), "'timestamp' must be a number or null"),
        (json.dumps(_call(timestamp=True)), "'timestamp' must be a number or null"),
        (json.dumps(_call(tool="")), "'tool' must be a non-empty string"),
        (json.dumps(_call(params=[1])), "'params' must be a JSON object"),
        (
            json.dumps(
                {"type": "event", "id": "e", "timestamp": None, "event_type": "boom", "data": {}}
            ),
            "unknown event_type 'boom'",
        ),
        (
            json.dumps(
                {
                    "type": "tool_result",
                    "id": "r",
                    "timestamp": None,
                    "success": 1,
                    "result": {},
                    "error": None,
                }
            ),
            "'success' must be a boolean",
        ),
    ],
)
def test_invalid_messages_raise_one_error_type_saying_what_is_wrong(
    raw: str, fragment: str
) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_message(raw)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_bad_tool_call_still_reports_its_id_and_type() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_message(json.dumps(_call(params="x")))
    assert (info.value.message_id, info.value.message_type) == ("id-1", "tool_call")


def test_oversize_messages_are_refused_before_parsing() -> None:
    big = json.dumps(_call(params={"blob": "x" * MAX_HOST_MESSAGE}))
    with pytest.raises(ProtocolError, match="exceeds the limit of 16777216 bytes"):
        parse_message(big, max_size=MAX_HOST_MESSAGE)
    assert isinstance(parse_message(big), ToolCall)


def test_encoding_refuses_values_json_cannot_carry() -> None:
    with pytest.raises(TypeError):
        encode_message(ToolResult("i", True, {"x": object()}, None))
    with pytest.raises(ValueError):
        encode_message(ToolResult("i", True, {"x": float("nan")}, None))
