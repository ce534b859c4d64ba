"""Fuzz of the host's parsing of what the guest sends: only documented errors escape.

The guest is hostile, so every value in a result may be anything JSON can carry
(deep nesting, huge integers, infinities: ``1e400`` reads back as ``inf``). Each
parser either returns well-formed data or raises its documented error:
``ShellResult.from_result`` → :class:`ToolError`, ``FsSnapshot.from_result`` →
:class:`SnapshotFormatError`, the pull chunk checks → :class:`ToolError`, the call
router's message intake → :class:`ProtocolViolation`.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adare_guest.commands import CapturedOutput
from adare_guest.protocol import ToolResult, encode_message, parse_message
from pytest_adare.agent.call_router import CallRouter
from pytest_adare.agent.transfer import chunk_data, chunk_layout
from pytest_adare.errors import ProtocolViolation, ToolError
from pytest_adare.forensics.entry import SnapshotFormatError
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.guest import ShellResult

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)  # JSON has no NaN; 1e400 arrives as inf
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)

SHELL_KEYS = ["returncode", "stdout", "stderr", "status", "message"] + [
    f"{stream}{suffix}"
    for stream in ("stdout", "stderr")
    for suffix in ("_base64", "_truncated", "_bytes")
]


def near_valid(keys: list[str], honest: dict[str, st.SearchStrategy[Any]]) -> Any:
    """Dicts over ``keys`` whose values are sometimes honest, sometimes anything."""
    return st.fixed_dictionaries(
        {},
        optional={key: honest.get(key, json_values) | json_values for key in keys},
    )


shell_results = near_valid(
    SHELL_KEYS,
    {
        "returncode": st.integers(-255, 255),
        "stdout": st.text(),
        "stdout_base64": st.sampled_from(["", "AAEC", "/w==", "not base64!"]),
        "stdout_bytes": st.integers(0, 2**40),
        "stdout_truncated": st.booleans(),
    },
)


@FUZZ
@given(shell_results)
def test_shell_results_parse_or_raise_tool_error(result: dict[str, Any]) -> None:
    try:
        parsed = ShellResult.from_result("cmd", result)
    except ToolError as error:
        assert error.tool == "execute_shell"
        return
    assert type(parsed.returncode) is int
    for name in ("stdout", "stderr"):
        text, raw = getattr(parsed, name), getattr(parsed, f"{name}_raw")
        assert isinstance(text, str) and isinstance(raw, bytes)
        assert getattr(parsed, f"{name}_total") >= len(raw)
        assert type(getattr(parsed, f"{name}_truncated")) is bool


@FUZZ
@given(st.binary(max_size=300), st.binary(max_size=50), st.integers(0, 200))
def test_the_agents_output_encoding_reaches_the_host_losslessly(
    stdout: bytes, stderr: bytes, limit: int
) -> None:
    captured = {}
    for name, data in (("stdout", stdout), ("stderr", stderr)):
        output = CapturedOutput(limit)
        output.add(data)
        captured.update(output.result_keys(name))
    wire = encode_message(ToolResult("id", True, {"returncode": 0, **captured}))
    message = parse_message(wire)
    assert isinstance(message, ToolResult) and message.result is not None
    parsed = ShellResult.from_result("cmd", message.result)
    for name, data in (("stdout", stdout), ("stderr", stderr)):
        raw = getattr(parsed, f"{name}_raw")
        assert getattr(parsed, f"{name}_total") == len(data)
        assert getattr(parsed, f"{name}_truncated") == (len(data) > limit)
        if len(data) <= limit:
            assert raw == data
        else:  # cut at the limit; a UTF-8 character cut in half is dropped whole
            assert data[:limit].startswith(raw) and len(raw) >= limit - 3
        assert getattr(parsed, name) == raw.decode("utf-8", "replace")


snapshot_results = near_valid(
    ["status", "snapshot", "collection_time", "errors", "message"],
    {
        "status": st.just("success"),
        "snapshot": st.dictionaries(
            st.text(max_size=12),
            near_valid(
                [
                    "type",
                    "size",
                    "mode",
                    "uid",
                    "gid",
                    "inode",
                    "mtime",
                    "atime",
                    "ctime",
                    "crtime",
                    "sha256",
                    "target",
                ],
                {
                    "type": st.sampled_from(["file", "dir", "symlink", "other"]),
                    "size": st.integers(0, 2**40),
                    "mtime": st.floats(0, 2e9),
                },
            ),
            max_size=4,
        ),
    },
)


@FUZZ
@given(snapshot_results)
def test_snapshot_results_parse_or_raise_snapshot_format_error(result: dict[str, Any]) -> None:
    try:
        snapshot = FsSnapshot.from_result(result, root="/")
    except SnapshotFormatError:
        return
    assert all(isinstance(path, str) for path in snapshot)


chunks = near_valid(
    ["chunk_index", "total_chunks", "file_size", "chunk_data", "sha256", "is_directory"],
    {
        "chunk_index": st.integers(0, 3),
        "total_chunks": st.integers(0, 4) | st.just(math.inf),
        "file_size": st.integers(-1, 40),
        "chunk_data": st.sampled_from(["", "QUJD", "QUJDRA==", "%%%"]),
    },
)


@FUZZ
@given(chunks, st.integers(0, 3))
def test_pull_chunk_checks_accept_or_raise_tool_error(chunk: dict[str, Any], index: int) -> None:
    try:
        total, size = chunk_layout("/f", chunk, 16)
        data = chunk_data("/f", chunk, index, 16, size)
    except ToolError:
        return
    assert total >= 1 and len(data) == min(16, size - index * 16)


class Recorder(CallRouter):
    """The router's message intake, with nothing under it (sends are dropped)."""

    async def _transmit(self, text: str) -> None:
        return None

    async def _transmit_binary(self, data: bytes) -> None:
        return None


@FUZZ
@given(json_values | st.text(max_size=50))
def test_any_message_is_routed_or_a_protocol_violation(value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value)

    async def feed() -> None:
        router = Recorder("fuzz")
        try:
            router._receive(text)
        except ProtocolViolation:
            pass
        router._fail_all(ProtocolViolation("done"))
        await router._stop_events()

    asyncio.run(feed())


@pytest.mark.parametrize("depth", [65, 10_000])
def test_deep_nesting_in_a_result_is_a_protocol_violation(depth: int) -> None:
    async def feed() -> None:
        router = Recorder("fuzz")
        with pytest.raises(ProtocolViolation, match="levels deep"):
            router._receive('{"type": "tool_result", "result": ' + "[" * depth + "]" * depth)
        await router._stop_events()

    asyncio.run(feed())
