"""Hostile input to the agent's parser, param validation and sessions (issue 12, defect 2).

Arbitrary JSON (deep nesting, integers of hundreds of digits, wrong types anywhere)
must end in a documented error for that one message, a ``ProtocolError`` from the
parser or a ``ParamError`` from validation, and the session must keep serving.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adare_guest.config import AgentConfig
from adare_guest.protocol import (
    MAX_NESTING,
    Message,
    ProtocolError,
    nesting_depth,
    parse_message,
)
from adare_guest.serial.link import MessageReceived
from adare_guest.serial.transport import LinkOutput, SerialTransport
from adare_guest.server import AdareVMServer, Session
from adare_guest.tool_params import ParamError
from adare_guest.tools.base import CallContext, ToolGroup, tool

StrictParse = Callable[[str | bytes], dict[str, Any]]

HUGE = 10**400
"""``1`` followed by 400 zeros: valid JSON, too large for a float."""
FUZZ = settings(
    deadline=None, max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**1000),
    st.integers(max_value=-(10**300), min_value=-(10**1000)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=25,
)
ENVELOPE_KEYS = ["type", "id", "timestamp", "tool", "params", "success", "result", "error", "data"]
MESSAGE_TYPES = ["tool_call", "tool_result", "event", "status", "connect", "ping", "pong", "x"]


def deep(depth: int, opening: str = "[", closing: str = "]") -> str:
    return opening * depth + closing * depth


def deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@st.composite
def hostile_messages(draw: st.DrawFn) -> str:
    """A message text: a near-valid envelope with hostile values, or raw hostile JSON."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        envelope: dict[str, Any] = {"type": draw(st.sampled_from(MESSAGE_TYPES))}
        for key in draw(st.lists(st.sampled_from(ENVELOPE_KEYS), max_size=6)):
            envelope[key] = draw(json_values)
        return json.dumps(envelope)
    if kind == 1:
        call = {
            "type": "tool_call",
            "id": draw(st.text(min_size=1, max_size=8)),
            "timestamp": draw(json_values),
            "tool": "probe",
            "params": draw(st.dictionaries(st.sampled_from(PROBE_PARAMS), json_values)),
        }
        return json.dumps(call)
    depth = draw(st.integers(MAX_NESTING - 2, 3000))
    nested = deep(depth) if kind == 2 else deep_object(depth)
    return (
        '{"type":"tool_call","id":"deep","timestamp":null,"tool":"probe",'
        f'"params":{{"count":{nested}}}}}'
    )


class ProbeTools(ToolGroup):
    """A harmless tool with params of every supported kind, for session fuzzing."""

    @tool(timeout=5)
    async def probe(
        self,
        ctx: CallContext,
        *,
        count: int = 0,
        ratio: float = 1.0,
        name: str = "",
        items: list[int] | None = None,
        table: dict[str, float] | None = None,
        mode: Literal["a", "b"] = "a",
        flag: bool | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        return {"status": "success", "message": "probed", "count": count}


PROBE_PARAMS = ["count", "ratio", "name", "items", "table", "mode", "flag", "timeout", "other"]


@pytest.fixture(scope="module")
def real_tools(tmp_path_factory: pytest.TempPathFactory) -> AdareVMServer:
    """The real tool registry (tools are validated, never run)."""
    run_dir = tmp_path_factory.mktemp("run")
    return AdareVMServer(AgentConfig(host="127.0.0.1", port=0, run_dir=run_dir))


@pytest.fixture
def probe_session(tmp_path: Path) -> Iterator[tuple[asyncio.AbstractEventLoop, Session, list[str]]]:
    """An in-process session of a server offering only ``probe``; what it sends is kept."""
    loop = asyncio.new_event_loop()
    server = AdareVMServer(AgentConfig(host="127.0.0.1", port=0, run_dir=tmp_path), [ProbeTools])
    sent: list[str] = []

    async def send(text: str) -> None:
        sent.append(text)

    async def open_session() -> Session:
        return server.open_session(send, "fuzz")

    session = loop.run_until_complete(open_session())
    try:
        yield loop, session, sent
    finally:
        loop.run_until_complete(session.close())
        loop.close()


# ----------------------------------------------------------------------- the parser


@FUZZ
@given(hostile_messages())
def test_the_parser_raises_only_protocol_errors(text: str) -> None:
    try:
        parsed = parse_message(text, max_size=16 * 1024 * 1024)
    except ProtocolError as exc:
        assert exc.reason
    else:
        assert isinstance(parsed, Message)


@FUZZ
@given(json_values)
def test_any_json_value_as_a_message_is_a_message_or_a_protocol_error(value: Any) -> None:
    for candidate in (value, {"type": "ping", "id": "p", "timestamp": value}):
        try:
            parse_message(json.dumps(candidate))
        except ProtocolError:
            pass


@pytest.mark.parametrize(
    "text",
    [deep(1000), deep(5000, "{", "}"), deep_object(1000), '["' + "[" * 3000 + '"]'],
    ids=["arrays", "braces", "objects", "brackets-in-a-string"],
)
def test_deep_nesting_is_measured_without_recursion(text: str) -> None:
    depth = nesting_depth(text)
    assert depth == (1 if text.startswith('["') else nesting_depth(text.encode()))
    if depth > MAX_NESTING:
        with pytest.raises(ProtocolError, match="levels deep"):
            parse_message(text)


def test_a_4kb_message_nested_1000_deep_is_a_protocol_error_naming_the_call() -> None:
    text = (
        '{"type":"tool_call","id":"c1","timestamp":null,"tool":"t",'
        f'"params":{{"p":{deep(1000)}}}}}'
    )
    assert len(text) < 4096
    with pytest.raises(ProtocolError) as caught:
        parse_message(text)
    assert "1002 levels deep" in caught.value.reason
    assert (caught.value.message_id, caught.value.message_type) == ("c1", "tool_call")


def test_a_timestamp_too_large_for_a_float_is_a_protocol_error_with_the_id() -> None:
    with pytest.raises(ProtocolError, match="too large") as caught:
        parse_message(f'{{"type":"ping","id":"p1","timestamp":{HUGE}}}')
    assert caught.value.message_id == "p1"


def test_nan_and_infinity_are_not_json() -> None:
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ProtocolError, match="not a JSON number"):
            parse_message(f'{{"type":"ping","id":"p","timestamp":{constant}}}')


# ----------------------------------------------------------------------- validation


@FUZZ
@given(st.data())
def test_param_validation_raises_only_param_errors(
    real_tools: AdareVMServer, data: st.DataObject
) -> None:
    bound = real_tools.tools[data.draw(st.sampled_from(sorted(real_tools.tools)))]
    names = [*sorted(bound.params), "unknown"]
    params = data.draw(st.dictionaries(st.sampled_from(names), json_values, max_size=5))
    try:
        checked = bound.validate(params)
    except ParamError as exc:
        assert bound.name in str(exc) and len(str(exc)) < 1000
    else:
        budget, limit = bound.timeout_for(checked)
        assert 0 < budget < limit


def test_a_timeout_of_400_digits_is_refused_naming_the_param(real_tools: AdareVMServer) -> None:
    with pytest.raises(ParamError, match="'timeout'"):
        real_tools.tools["execute_shell"].validate({"shell_command": "true", "timeout": HUGE})


def test_an_integer_param_must_fit_64_bits(real_tools: AdareVMServer) -> None:
    pull = real_tools.tools["pull_file_chunk"]
    with pytest.raises(ParamError, match=r"chunk_index.*of 1329 bits"):
        pull.validate({"guest_path": "/x", "chunk_index": HUGE})
    assert pull.validate({"guest_path": "/x", "chunk_index": 2**62})["chunk_index"] == 2**62


# ----------------------------------------------------------------------- sessions


@FUZZ
@given(st.lists(hostile_messages(), min_size=1, max_size=4))
def test_a_session_answers_hostile_messages_and_keeps_serving(
    probe_session: tuple[asyncio.AbstractEventLoop, Session, list[str]],
    strict_parser: StrictParse,
    texts: list[str],
) -> None:
    loop, session, sent = probe_session

    async def exchange() -> None:
        for text in texts:
            await session.handle_text(text)
        await session.handle_text('{"type":"ping","id":"alive","timestamp":null}')
        await asyncio.gather(*(task for task, _ctx in session._calls.values()))

    loop.run_until_complete(asyncio.wait_for(exchange(), 30))
    replies = [strict_parser(text) for text in sent]
    assert not session.closed
    assert any(r["type"] == "pong" and r["id"] == "alive" for r in replies)
    for reply in replies:
        if reply["type"] == "event" and reply["event_type"] == "error":
            assert reply["data"]["message"]
    sent.clear()


@pytest.mark.asyncio
async def test_deep_and_huge_calls_over_websocket_leave_the_session_and_its_commands_alive(
    client: Any,
) -> None:
    running = await client.send_call("execute_shell", {"shell_command": "sleep 1; echo survived"})
    deep_call = (
        '{"type":"tool_call","id":"deep","timestamp":null,"tool":"get_timestamp",'
        f'"params":{{"x":{deep(1000)}}}}}'
    )
    await client.send_raw(deep_call)
    await client.send_raw(
        '{"type":"tool_call","id":"huge","timestamp":null,"tool":"execute_shell",'
        f'"params":{{"shell_command":"true","timeout":{HUGE}}}}}'
    )
    await client.send_raw('{"type":"ping","id":"p","timestamp":null,"x":' + deep(2000) + "}")
    deep_answer = await client.wait_for(lambda m: m["id"] == "deep")
    huge_answer = await client.wait_for(lambda m: m["id"] == "huge")
    assert deep_answer["success"] is False and "levels deep" in deep_answer["error"]
    assert huge_answer["success"] is False and "'timeout'" in huge_answer["error"]
    error = await client.wait_for(lambda m: m["type"] == "event" and m["data"].get("id") == "p")
    assert error["event_type"] == "error" and "levels deep" in error["data"]["message"]
    finished = await client.result(running)
    assert finished["result"]["stdout"] == "survived\n"
    assert (await client.ok("get_timestamp"))["status"] == "success"


@pytest.mark.asyncio
async def test_a_failing_message_does_not_end_the_serial_device_loop(tmp_path: Path) -> None:
    """A message whose handling raises is reported; the device thread carries on."""
    errors: list[str] = []

    class ExplodingSession:
        async def handle_text(self, text: str | bytes) -> None:
            raise RecursionError("maximum recursion depth exceeded")

        async def close(self) -> None:
            return None

    class FakeServer:
        def open_session(self, send: Any, peer: str) -> ExplodingSession:
            return ExplodingSession()

        def health(self) -> dict[str, Any]:
            return {}

        def record_error(self, message: str) -> None:
            errors.append(message)

    transport = SerialTransport(FakeServer(), "/dev/null-fake", open_port=lambda path: None)  # type: ignore[arg-type,return-value]
    transport.process_input = lambda data, stalled=False: LinkOutput(  # type: ignore[method-assign]
        b"", False, [MessageReceived("{}")]
    )
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(transport._serve_input, None, loop, b"x", False)  # type: ignore[arg-type]
    assert errors and "RecursionError" in errors[0]
