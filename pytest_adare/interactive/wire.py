"""The owner socket's framing: ``kind u8 | length u32 | payload`` over a Unix stream.

The client opens with one ``REQUEST`` (JSON: ``{"op": "shell"|"screen"|"stop"|"ping",
...}``); a shell then carries ``DATA`` both ways and ``RESIZE`` from the client, and ends
with ``EXIT`` (JSON ``{"exit_code", "signal"}``). ``RESULT`` (JSON), ``PNG`` and ``ERROR``
(text) answer the other requests. Only the user reaches the socket (0600 in a 0700
directory), but the length is still bounded.
"""

from __future__ import annotations

import asyncio
import enum
import json
import struct
from typing import Any

HEADER = struct.Struct(">BI")
MAX_PAYLOAD = 64 * 1024 * 1024
"""A screenshot PNG fits; anything bigger is a broken peer."""


class Kind(enum.IntEnum):
    """What a frame carries."""

    REQUEST = 1
    DATA = 2
    RESIZE = 3
    EXIT = 4
    RESULT = 5
    PNG = 6
    ERROR = 7


class WireError(ValueError):
    """A frame that is not one (unknown kind, too long)."""


def encode(kind: Kind, payload: bytes = b"") -> bytes:
    """One frame's bytes.

    >>> encode(Kind.DATA, b"ls\\n").hex()
    '02000000036c730a'
    """
    return HEADER.pack(kind, len(payload)) + payload


def encode_json(kind: Kind, value: dict[str, Any]) -> bytes:
    """A frame whose payload is ``value`` as JSON."""
    return encode(kind, json.dumps(value).encode())


async def read_frame(reader: asyncio.StreamReader) -> tuple[Kind, bytes] | None:
    """The next frame, or None at the end of the stream.

    :raise WireError: a malformed frame.
    """
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError:
        return None
    kind, length = HEADER.unpack(head)
    if length > MAX_PAYLOAD:
        raise WireError(f"a frame of {length} bytes (at most {MAX_PAYLOAD})")
    try:
        frame_kind = Kind(kind)
    except ValueError:
        raise WireError(f"unknown frame kind {kind}") from None
    try:
        return frame_kind, await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        return None


def parse_json(payload: bytes) -> dict[str, Any]:
    """A JSON object payload.

    :raise WireError: not a JSON object.
    """
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise WireError("not a JSON object")
    return value
