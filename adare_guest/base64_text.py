"""Big base64 strings in results, spliced into the JSON text instead of re-encoded.

A file chunk is several MiB of base64. ``json.dumps`` scans every character of it for
escaping, which in a guest without KVM costs as much as the base64 encoding itself;
base64 needs no escaping. A tool marks such a value as :class:`Base64Text`, and
:func:`encode_with_base64_text` builds the message text around it, giving exactly the
JSON (envelope, keys and order) that :func:`adare_guest.protocol.encode_message`
would::

    result = {"status": "success", "chunk_data": Base64Text.of(data)}
    text = encode_with_base64_text(ToolResult(call_id, True, result))
"""

from __future__ import annotations

import binascii
import dataclasses
import json

from adare_guest.protocol import Message, ToolResult, encode_message


class Base64Text(str):
    """A ``str`` holding only base64 characters; build it with :meth:`of`."""

    __slots__ = ()

    @classmethod
    def of(cls, data: bytes) -> Base64Text:
        """The standard base64 of ``data`` (no newlines)."""
        return cls(binascii.b2a_base64(data, newline=False), "ascii")  # decoded in place


def encode_with_base64_text(msg: Message) -> str | None:
    """``encode_message(msg)`` for a result holding :class:`Base64Text` values, without
    passing them through the JSON encoder; ``None`` when ``msg`` holds none.
    """
    if not isinstance(msg, ToolResult) or not isinstance(msg.result, dict):
        return None
    spliced = {key: value for key, value in msg.result.items() if type(value) is Base64Text}
    if not spliced:
        return None
    # Placeholders hold NUL characters, which JSON escapes: the escaped form cannot
    # stand in the encoded text for any other reason than being our placeholder.
    marks = {key: f"\0adare-base64-{n}\0" for n, key in enumerate(spliced)}
    text = encode_message(dataclasses.replace(msg, result={**msg.result, **marks}))
    pieces: list[str] = []
    for key, mark in marks.items():
        head, separator, text = text.partition(json.dumps(mark))
        if not separator:
            raise AssertionError(f"placeholder for {key!r} missing from the encoded result")
        pieces += [head, '"', spliced[key], '"']
    pieces.append(text)
    return "".join(pieces)
