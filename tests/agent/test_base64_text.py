"""Base64 chunks spliced into the result text give exactly the JSON encoder's text."""

from __future__ import annotations

import base64
import json
import os

import pytest

from adare_guest.base64_text import Base64Text, encode_with_base64_text
from adare_guest.protocol import Event, EventType, Message, ToolResult, encode_message


def test_spliced_text_equals_the_encoders_text_byte_for_byte() -> None:
    data = os.urandom(300_000)
    result = {
        "status": "success",
        "chunk_data": Base64Text.of(data),
        "path": 'odd "name"\\ \udcff é \x00',
        "thumb": Base64Text.of(b"\xff\xfe"),
        "eof": True,
    }
    msg = ToolResult("call-1", True, result, None, timestamp=1.5)
    text = encode_with_base64_text(msg)
    assert text == encode_message(msg)
    assert text is not None
    decoded = json.loads(text)
    assert base64.b64decode(decoded["result"]["chunk_data"]) == data
    assert list(decoded) == ["type", "id", "timestamp", "success", "result", "error"]


@pytest.mark.parametrize(
    "msg",
    [
        ToolResult("c", True, {"chunk_data": base64.b64encode(b"x").decode()}),
        ToolResult("c", False, None, "boom"),
        Event(EventType.LOG, {"message": Base64Text.of(b"x")}),
    ],
)
def test_messages_without_marked_results_are_left_to_the_encoder(msg: Message) -> None:
    assert encode_with_base64_text(msg) is None


def test_base64_text_is_standard_base64_without_newlines() -> None:
    data = os.urandom(1000)
    text = Base64Text.of(data)
    assert text == base64.b64encode(data).decode("ascii") and "\n" not in text
