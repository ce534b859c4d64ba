"""``execute_shell``'s posix_spawn path answers exactly as the asyncio-subprocess path
it replaces (forced with ``ADARE_NO_FAST_SPAWN``), over a real WebSocket."""

from __future__ import annotations

from typing import Any

import pytest

from adare_guest import commands

pytestmark = pytest.mark.asyncio
VARYING = {"command_id", "execution_time"}


@pytest.mark.parametrize(
    "params",
    [
        {"shell_command": "echo out; echo err >&2; exit 3"},
        {"shell_command": "printf '\\377\\376'; printf 'é' >&2"},
        {"shell_command": "head -c 3000000 /dev/zero", "max_output_bytes": 1000},
        {"shell_command": "echo $ADARE_PROBE", "env": {"ADARE_PROBE": "x y"}},
        {"shell_command": "no-such-program-here --x", "shell": False},
        {"shell_command": "[ \"$(ps -o sid= -p $$ | tr -d ' ')\" = $$ ] && echo leader"},
        {"shell_command": "sleep 5", "timeout": 0.5},
    ],
)
async def test_spawned_commands_answer_as_the_subprocess_path(
    client: Any, params: dict[str, Any]
) -> None:
    assert commands.FAST_SPAWN, "this host has posix_spawn and pidfd_open"
    fast = await client.ok("execute_shell", **params)
    env = {**params.get("env", {}), commands.NO_FAST: "1"}
    old = await client.ok("execute_shell", **{**params, "env": env})
    if "leader" in params["shell_command"]:  # the command leads a session of its own
        assert fast["stdout"] == "leader\n"
    assert {k: v for k, v in fast.items() if k not in VARYING} == {
        k: v for k, v in old.items() if k not in VARYING
    }
