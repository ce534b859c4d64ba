"""The names of the agent's tools and of the params the host spells out (a leaf).

The guest defines each tool as a ``@tool`` method of that name; the host imports these
constants instead of writing the names again, and ``tests/agent/test_tool_names.py``
keeps :data:`ALL_TOOLS` equal to what the server registers. The names are the wire
protocol (DESIGN §3): they never change, only new ones are added.

>>> from adare_guest import tool_names
>>> tool_names.EXECUTE_SHELL, tool_names.SHELL_COMMAND
('execute_shell', 'shell_command')
"""

from __future__ import annotations

# system (tools/system.py)
EXECUTE_SHELL = "execute_shell"
GET_STATUS = "get_status"
COLLECT_SYSTEM_INFO = "collect_system_info"
INSTALL_DEPENDENCIES = "install_dependencies"
# clock (tools/clock.py)
GET_TIMESTAMP = "get_timestamp"
# files (tools/files.py)
PULL_FILE_CHUNK = "pull_file_chunk"
PUSH_FILE_CHUNK = "push_file_chunk"
PULL_FILE = "pull_file"
PUSH_FILE = "push_file"
GET_FILESYSTEM_SNAPSHOT = "get_filesystem_snapshot"
# GUI (tools/gui.py)
SCREENSHOT = "screenshot"
SCREENSHOT_WINDOW = "screenshot_window"
SET_SCREENSHOT_METHOD = "set_screenshot_method"
CLICK = "click"
DOUBLE_CLICK = "double_click"
RIGHT_CLICK = "right_click"
GOTO = "goto"
DRAG = "drag"
SCROLL = "scroll"
KEYBOARD = "keyboard"
LIST_WINDOWS = "list_windows"
OPEN_TERMINAL = "open_terminal"
IDLE = "idle"
# test functions (tools/testing.py)
UPLOAD_TESTFUNCTIONS = "upload_testfunctions"
SET_VARIABLES = "set_variables"
RUN_TEST = "run_test"
# session (tools/session.py)
REKEY = "rekey"
SEED_RANDOM = "seed_random"
# the server itself (server.py)
CHAIN_COMMANDS = "chain_commands"

ALL_TOOLS = frozenset(
    {
        EXECUTE_SHELL,
        GET_STATUS,
        COLLECT_SYSTEM_INFO,
        INSTALL_DEPENDENCIES,
        GET_TIMESTAMP,
        PULL_FILE_CHUNK,
        PUSH_FILE_CHUNK,
        PULL_FILE,
        PUSH_FILE,
        GET_FILESYSTEM_SNAPSHOT,
        SCREENSHOT,
        SCREENSHOT_WINDOW,
        SET_SCREENSHOT_METHOD,
        CLICK,
        DOUBLE_CLICK,
        RIGHT_CLICK,
        GOTO,
        DRAG,
        SCROLL,
        KEYBOARD,
        LIST_WINDOWS,
        OPEN_TERMINAL,
        IDLE,
        UPLOAD_TESTFUNCTIONS,
        SET_VARIABLES,
        RUN_TEST,
        REKEY,
        SEED_RANDOM,
        CHAIN_COMMANDS,
    }
)
"""Every tool of a full agent (a guest without a desktop still answers the GUI tools)."""

# Params the host puts in a dict by name (keyword arguments spell themselves).
SHELL_COMMAND = "shell_command"
"""``execute_shell``'s command text."""
GUEST_PATH = "guest_path"
"""The guest file of ``pull_file_chunk``, ``push_file_chunk``, ``pull_file``, ``push_file``."""
TIMEOUT = "timeout"
"""The caller's budget in seconds, for the tools that declare it."""
