"""The wire model shared by host and guest (DESIGN §3), sans-I/O.

One JSON object per WebSocket text frame (or per reassembled serial message).
Every message type has a fixed set of envelope keys, no more and no fewer:
:func:`encode_message` emits exactly those keys and :func:`parse_message`
rejects anything else with a :class:`ProtocolError` that says what was wrong.

>>> call = ToolCall(tool="get_timestamp", params={})
>>> parse_message(encode_message(call)) == call
True

JSON is emitted with ``ensure_ascii=True``: the output is always plain ASCII, so
strings that carry lone surrogates (file names that are not valid UTF-8, kept
with ``surrogateescape``) survive the trip as ``\\udcXX`` escapes and can be
turned back into the original bytes with :func:`os.fsencode`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Union

MAX_HOST_MESSAGE = 16 * 1024 * 1024
"""Largest host→guest message in bytes (guest→host messages are unlimited)."""
MAX_NESTING = 64
"""Deepest nesting of arrays/objects a parsed message may have (checked before decoding,
so a hostile 4 KB message of 1000 ``[`` cannot make the decoder recurse too deep)."""


class MessageType(str, Enum):
    """The ``type`` field of an envelope."""

    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    EVENT = "event"
    STATUS = "status"
    CONNECT = "connect"
    PING = "ping"
    PONG = "pong"

    def __str__(self) -> str:
        return self.value


class EventType(str, Enum):
    """The ``event_type`` of an ``event`` message (DESIGN §3)."""

    TEST_START = "test_start"
    TEST_COMPLETE = "test_complete"
    TEST_FAILED = "test_failed"
    GUI_CLICK = "gui_click"
    GUI_FIND = "gui_find"
    GUI_KEYPRESS = "gui_keypress"
    GUI_IDLE = "gui_idle"
    GUI_DRAG = "gui_drag"
    COMMAND_START = "command_start"
    COMMAND_COMPLETE = "command_complete"
    LOG = "log"
    ERROR = "error"
    PROGRESS = "progress"

    def __str__(self) -> str:
        return self.value


class ProtocolError(ValueError):
    """A message that does not follow DESIGN §3.

    ``message_id`` and ``message_type`` hold whatever could be read from the bad
    message (so a receiver can answer a broken ``tool_call`` by its id), else None.
    """

    def __init__(
        self, reason: str, *, message_id: str | None = None, message_type: str | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.message_id = message_id
        self.message_type = message_type


def new_id() -> str:
    """A fresh message id (uuid4 string)."""
    return str(uuid.uuid4())


def _now() -> float:
    return time.time()


@dataclass
class ToolCall:
    """Host→guest: run ``tool`` with ``params``."""

    tool: str
    params: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.TOOL_CALL, init=False, repr=False)


@dataclass
class ToolResult:
    """Guest→host: the answer to the ``tool_call`` with the same ``id``."""

    id: str
    success: bool
    result: dict[str, Any] | None = None
    error: str | None = None
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.TOOL_RESULT, init=False, repr=False)


@dataclass
class Event:
    """Guest→host: something happened; events caused by a call carry ``data["call_id"]``."""

    event_type: EventType
    data: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.EVENT, init=False, repr=False)


@dataclass
class Status:
    """Guest→host: a status update."""

    status: str
    data: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.STATUS, init=False, repr=False)


@dataclass
class Connect:
    """Either direction: who is talking (version detection)."""

    client_info: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.CONNECT, init=False, repr=False)


@dataclass
class Ping:
    """Either direction: are you there?"""

    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.PING, init=False, repr=False)


@dataclass
class Pong:
    """The answer to a :class:`Ping`; echoes its ``id``."""

    id: str = field(default_factory=new_id)
    timestamp: float | None = field(default_factory=_now)
    type: MessageType = field(default=MessageType.PONG, init=False, repr=False)


# Evaluated at run time: Union, since the guest's Python 3.9 has no ``X | Y`` of classes.
Message = Union[ToolCall, ToolResult, Event, Status, Connect, Ping, Pong]

ENVELOPE_KEYS: dict[MessageType, frozenset[str]] = {
    MessageType.TOOL_CALL: frozenset({"type", "id", "timestamp", "tool", "params"}),
    MessageType.TOOL_RESULT: frozenset({"type", "id", "timestamp", "success", "result", "error"}),
    MessageType.EVENT: frozenset({"type", "id", "timestamp", "event_type", "data"}),
    MessageType.STATUS: frozenset({"type", "id", "timestamp", "status", "data"}),
    MessageType.CONNECT: frozenset({"type", "id", "timestamp", "client_info"}),
    MessageType.PING: frozenset({"type", "id", "timestamp"}),
    MessageType.PONG: frozenset({"type", "id", "timestamp"}),
}
"""Exactly the top-level keys of each message type."""


def message_to_dict(msg: Message) -> dict[str, Any]:
    """The envelope of ``msg`` as a plain dict with exactly its type's keys."""
    envelope: dict[str, Any] = {"type": msg.type.value, "id": msg.id, "timestamp": msg.timestamp}
    if isinstance(msg, ToolCall):
        envelope.update(tool=msg.tool, params=msg.params)
    elif isinstance(msg, ToolResult):
        envelope.update(success=msg.success, result=msg.result, error=msg.error)
    elif isinstance(msg, Event):
        envelope.update(event_type=EventType(msg.event_type).value, data=msg.data)
    elif isinstance(msg, Status):
        envelope.update(status=msg.status, data=msg.data)
    elif isinstance(msg, Connect):
        envelope.update(client_info=msg.client_info)
    return envelope


def encode_message(msg: Message) -> str:
    """Serialise ``msg`` to a JSON text frame (ASCII, exactly the envelope keys).

    :raise TypeError: a value inside ``params``/``result``/``data`` is not JSON-serialisable.
    :raise ValueError: a float is NaN/infinite, or an event type is unknown.
    """
    return _dumps(message_to_dict(msg))


LARGE_CONTAINER = 2000
"""A result holding a container with more items than this is a large message."""
LARGE_STRING = 256 * 1024
"""... and so is one holding a string longer than this (e.g. a file chunk)."""


def is_large_message(msg: Message) -> bool:
    """Does ``msg`` hold a big container (a snapshot) or string (a file chunk) worth
    encoding off the event loop?"""
    payload = msg.result if isinstance(msg, ToolResult) else getattr(msg, "data", None)
    if not isinstance(payload, dict):
        return False
    return any(
        (isinstance(value, (dict, list)) and len(value) > LARGE_CONTAINER)
        or (isinstance(value, str) and len(value) > LARGE_STRING)
        for value in payload.values()
    )


_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _iter_value(value: Any, depth: int) -> Iterator[str]:
    if depth > 0 and isinstance(value, dict):
        separator = "{"
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, got {type(key).__name__}")
            yield f"{separator}{_dumps(key)}:"
            yield from _iter_value(item, depth - 1)
            separator = ","
        yield "}" if value else "{}"
    elif depth > 0 and isinstance(value, list):
        separator = "["
        for item in value:
            yield separator
            yield from _iter_value(item, depth - 1)
            separator = ","
        yield "]" if value else "[]"
    else:
        yield _dumps(value)


def iter_encode_message(msg: Message) -> Iterator[str]:
    """:func:`encode_message` in many small pieces (``"".join`` gives the same text).

    Each piece is a separate short ``json.dumps`` call, so a worker thread encoding a
    huge result lets the event loop run in between (one big ``json.dumps`` holds the
    GIL until it is done).
    """
    return _iter_value(message_to_dict(msg), 3)


def parse_message(raw: str | bytes | Mapping[str, Any], *, max_size: int | None = None) -> Message:
    """Parse and validate one message.

    ``raw`` is a JSON text (str or UTF-8 bytes) or an already decoded dict.
    ``max_size`` bounds the encoded size in bytes (the guest passes
    :data:`MAX_HOST_MESSAGE`).

    :raise ProtocolError: invalid JSON, not an object, unknown ``type``, missing or
        extra envelope keys, or a field of the wrong type.
    """
    if isinstance(raw, Mapping):
        obj: Any = raw
    else:
        obj = _decode_json(raw, max_size)
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"message must be a JSON object, got {type(obj).__name__}")
    msg_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    raw_type = obj.get("type")
    try:
        mtype = MessageType(raw_type)
    except (ValueError, TypeError):
        known = ", ".join(t.value for t in MessageType)
        raise ProtocolError(
            f"unknown message type {_brief(raw_type)} (expected one of: {known})", message_id=msg_id
        ) from None
    try:
        return _build(mtype, obj)
    except ProtocolError as exc:
        raise ProtocolError(
            f"bad {mtype.value} message: {exc.reason}", message_id=msg_id, message_type=mtype.value
        ) from None


def _decode_json(raw: str | bytes, max_size: int | None) -> Any:
    if max_size is not None and len(raw) * (1 if isinstance(raw, bytes) else 4) > max_size:
        # Only now pay for measuring the UTF-8 size (a str has at most 4 bytes a char).
        size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
        if size > max_size:
            raise ProtocolError(f"message of {size} bytes exceeds the limit of {max_size} bytes")
    depth = nesting_depth(raw)
    if depth > MAX_NESTING:
        # Not decoded, but the envelope's own id and type are still readable: a bad call
        # is answered by its id.
        fields = top_level_strings(raw, ("id", "type"))
        raise ProtocolError(
            f"message nests {depth} levels deep; the limit is {MAX_NESTING}",
            message_id=fields.get("id") or None,
            message_type=fields.get("type"),
        )
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}") from None


# A JSON string (with its escapes) or one bracket: brackets inside strings do not nest.
_NESTING_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_NESTING_TOKENS_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def nesting_depth(raw: str | bytes) -> int:
    """How deep arrays and objects nest in the JSON text ``raw`` (0 for a scalar).

    Cheap on ordinary messages: the depth cannot exceed the number of opening
    brackets, which is counted in C; only texts with more of them than
    :data:`MAX_NESTING` are scanned token by token. Invalid JSON gives some number;
    the decoder reports what is wrong with it.
    """
    if isinstance(raw, str):
        openers = raw.count("[") + raw.count("{")
        tokens = _NESTING_TOKENS.finditer(raw)
        opening: tuple[str | int, ...] = ("[", "{")
        closing: tuple[str | int, ...] = ("]", "}")
    else:
        openers = raw.count(b"[") + raw.count(b"{")
        tokens = _NESTING_TOKENS_BYTES.finditer(raw)  # type: ignore[assignment]
        opening, closing = (b"["[0], b"{"[0]), (b"]"[0], b"}"[0])
    if openers <= MAX_NESTING:
        return openers
    depth = deepest = 0
    for match in tokens:
        token = match.group()[0]
        if token in opening:
            depth += 1
            deepest = max(deepest, depth)
        elif token in closing:
            depth -= 1
    return deepest


_TOP_LEVEL_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]', re.DOTALL)


def top_level_strings(raw: str | bytes, keys: tuple[str, ...]) -> dict[str, str]:
    """String values of ``keys`` in the outermost object of ``raw``, read without
    decoding the whole text (for answering a message too deep to decode).

    >>> top_level_strings('{"a":{"id":"inner"},"id":"outer"}', ("id",))
    {'id': 'outer'}
    """
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
    found: dict[str, str] = {}
    depth = 0
    recent: list[str] = []  # the last three depth-1 tokens: "key" : "value"
    for match in _TOP_LEVEL_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            recent.clear()
            continue
        if token in "]}":
            depth -= 1
            recent.clear()
            continue
        if depth != 1:
            continue
        recent = [*recent[-2:], token]
        if len(recent) == 3 and recent[1] == ":" and recent[2].startswith('"'):
            try:
                key, value = json.loads(recent[0]), json.loads(recent[2])
            except ValueError:
                continue
            if key in keys and isinstance(value, str):
                found.setdefault(key, value)
    return found


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _build(mtype: MessageType, obj: Mapping[str, Any]) -> Message:
    expected = ENVELOPE_KEYS[mtype]
    keys = set(obj)
    if keys != expected:
        problems = []
        if missing := sorted(expected - keys):
            problems.append(f"missing keys {missing}")
        if extra := sorted(str(k) for k in keys - expected):
            problems.append(f"unexpected keys {extra}")
        raise ProtocolError("; ".join(problems))
    msg_id = _require_id(obj["id"])
    timestamp = _require_timestamp(obj["timestamp"])
    if mtype is MessageType.TOOL_CALL:
        tool = obj["tool"]
        if not isinstance(tool, str) or not tool:
            raise ProtocolError(f"'tool' must be a non-empty string, got {_brief(tool)}")
        return ToolCall(tool, _require_dict("params", obj["params"]), msg_id, timestamp)
    if mtype is MessageType.TOOL_RESULT:
        if not isinstance(obj["success"], bool):
            raise ProtocolError(f"'success' must be a boolean, got {_brief(obj['success'])}")
        result = obj["result"]
        if result is not None:
            result = _require_dict("result", result)
        error = obj["error"]
        if error is not None and not isinstance(error, str):
            raise ProtocolError(f"'error' must be a string or null, got {type(error).__name__}")
        return ToolResult(msg_id, obj["success"], result, error, timestamp)
    if mtype is MessageType.EVENT:
        try:
            event_type = EventType(obj["event_type"])
        except ValueError:
            raise ProtocolError(f"unknown event_type {_brief(obj['event_type'])}") from None
        return Event(event_type, _require_dict("data", obj["data"]), msg_id, timestamp)
    if mtype is MessageType.STATUS:
        if not isinstance(obj["status"], str):
            raise ProtocolError(f"'status' must be a string, got {_brief(obj['status'])}")
        return Status(obj["status"], _require_dict("data", obj["data"]), msg_id, timestamp)
    if mtype is MessageType.CONNECT:
        return Connect(_require_dict("client_info", obj["client_info"]), msg_id, timestamp)
    if mtype is MessageType.PING:
        return Ping(msg_id, timestamp)
    return Pong(msg_id, timestamp)


def _require_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"'id' must be a non-empty string, got {_brief(value)}")
    return value


def _require_timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"'timestamp' must be a number or null, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ProtocolError("'timestamp' is too large for a number of seconds") from None


def _require_dict(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{key!r} must be a JSON object, got {type(value).__name__}")
    return value


def _brief(value: Any) -> str:
    """A short description of a bad value for an error message (never megabytes)."""
    if isinstance(value, str):
        text = repr(value[:80])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        text = f"an integer of {value.bit_length()} bits"
    elif isinstance(value, (dict, list)):
        text = f"a {type(value).__name__} of {len(value)} items"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
