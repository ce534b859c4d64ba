"""``adare_guest/tool_names.py``: the one spelling of the tool names, guest and host."""

from __future__ import annotations

import ast
from pathlib import Path

from adare_guest import tool_names
from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer

REPO = Path(__file__).resolve().parents[2]
HOST = REPO / "pytest_adare"
"""Host code calls tools by the names of :mod:`adare_guest.tool_names`, never by literals."""
CALLS_BY_NAME = {"call", "_call", "_checked", "ToolError", "admit", "tool_result"}


def test_the_names_are_exactly_the_tools_the_agent_registers() -> None:
    server = AdareVMServer(AgentConfig())
    assert set(server.tools) == tool_names.ALL_TOOLS
    assert tool_names.SHELL_COMMAND in server.tools[tool_names.EXECUTE_SHELL].params
    for tool in ("PULL_FILE_CHUNK", "PUSH_FILE_CHUNK", "PULL_FILE", "PUSH_FILE"):
        assert tool_names.GUEST_PATH in server.tools[getattr(tool_names, tool)].params
    assert tool_names.TIMEOUT in server.tools[tool_names.EXECUTE_SHELL].params


def literal_tool_names(path: Path) -> list[str]:
    """``file:line name`` of each tool name written as a string where a tool is called."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if (
            called in CALLS_BY_NAME
            and isinstance(first, ast.Constant)
            and first.value in tool_names.ALL_TOOLS
        ):
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {first.value}")
    return found


def test_the_host_calls_tools_by_the_shared_names() -> None:
    files = sorted(HOST.rglob("*.py"))
    assert len(files) > 50
    assert [hit for path in files for hit in literal_tool_names(path)] == []
