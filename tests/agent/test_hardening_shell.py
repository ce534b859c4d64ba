"""``execute_shell`` against hostile commands (issue 12, defects 4 and 8).

Output is bounded and lossless, bad requests never leave a ``command_start`` without
its ``command_complete``, background output never lands in a predictable ``/tmp``
path, and a child that left the process group with ``setsid`` dies with the call.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import stat
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adare_guest.config import AgentConfig

pytestmark = pytest.mark.asyncio


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def unique_seconds() -> str:
    """A sleep duration no other process on the machine uses: it marks our processes."""
    return f"7{secrets.randbelow(10**6)}.{secrets.randbelow(10**3)}"


async def test_output_beyond_the_cap_is_counted_not_kept(client: Any) -> None:
    result = await client.ok(
        "execute_shell",
        shell_command="head -c 3000 /dev/zero | tr '\\0' a; printf 'err' >&2",
        max_output_bytes=1000,
    )
    assert result["stdout"] == "a" * 1000
    assert result["stdout_truncated"] is True and result["stdout_bytes"] == 3000
    assert result["stderr"] == "err" and result["stderr_truncated"] is False
    assert result["stderr_bytes"] == 3 and result["truncated"] is True


async def test_a_cap_outside_the_documented_range_is_refused(client: Any) -> None:
    result = await client.ok("execute_shell", shell_command="true", max_output_bytes=2**40)
    assert result["status"] == "error" and "max_output_bytes" in result["message"]


def write_random(path: Path, size: int) -> bytes:
    payload = os.urandom(size)
    path.write_bytes(payload)
    return payload


async def test_binary_output_travels_as_base64_without_inflation(
    client: Any, tmp_path: Path
) -> None:
    payload = write_random(tmp_path / "binary", 300_000)
    message = await client.call("execute_shell", {"shell_command": f"cat {tmp_path}/binary"})
    result = message["result"]
    assert base64.b64decode(result["stdout_base64"]) == payload and result["stdout"] == ""
    assert result["stdout_bytes"] == len(payload) and result["stdout_truncated"] is False
    assert len(json.dumps(message)) < 1.4 * len(payload)


async def test_text_cut_at_the_cap_inside_a_character_stays_text(client: Any) -> None:
    result = await client.ok(
        "execute_shell", shell_command="printf 'aé'; printf 'é%.0s' $(seq 100)", max_output_bytes=2
    )
    assert result["stdout"] == "a" and "stdout_base64" not in result


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"shell_command": "echo a\0b"}, "NUL"),
        ({"shell_command": "true", "env": {"A=B": "x"}}, "'='"),
        ({"shell_command": "true", "env": {"": "x"}}, "non-empty"),
        ({"shell_command": "true", "env": {"A": "x\0y"}}, "NUL"),
        ({"shell_command": "true", "cwd": "/tmp\0x"}, "NUL"),
    ],
)
async def test_a_request_the_os_would_refuse_gets_an_error_and_no_dangling_start_event(
    client: Any, params: dict[str, Any], complaint: str
) -> None:
    call_id = await client.send_call("execute_shell", params)
    answer = await client.result(call_id)
    assert answer["success"] is True, answer["error"]
    result = answer["result"]
    assert result["status"] == "error" and complaint in result["message"]
    assert result["error"] == result["message"]
    await client.ok("get_timestamp")  # every event of the call has arrived by now
    kinds = [e["event_type"] for e in client.events(call_id)]
    assert kinds.count("command_start") == kinds.count("command_complete")


async def test_a_command_that_cannot_start_still_completes_its_events(client: Any) -> None:
    call_id = await client.send_call(
        "execute_shell", {"shell_command": "/nonexistent/adare-binary", "shell": False}
    )
    result = (await client.result(call_id))["result"]
    assert result["status"] == "error" and "cannot start" in result["message"]
    await client.ok("get_timestamp")
    kinds = [e["event_type"] for e in client.events(call_id)]
    assert kinds == ["command_start", "command_complete"]


@pytest_asyncio.fixture
async def unwritable_run_dir_client(tmp_path: Path, start_agent: Any, client_of: Any) -> Any:
    """A client of an agent whose run dir cannot hold a ``background`` directory."""
    run_dir = tmp_path / "run-is-a-file"
    run_dir.write_text("not a directory")
    server = await start_agent(AgentConfig(host="127.0.0.1", port=0, run_dir=run_dir))
    return await client_of(server)


async def test_background_output_without_a_run_dir_goes_to_a_private_new_directory(
    unwritable_run_dir_client: Any,
) -> None:
    client = unwritable_run_dir_client
    first = await client.ok("execute_shell", shell_command="echo one", background=True)
    second = await client.ok("execute_shell", shell_command="echo two", background=True)
    directory = Path(first["stdout_path"]).parent
    other = Path(second["stdout_path"]).parent
    try:
        assert first["status"] == "success", first["message"]
        assert directory != Path("/tmp/adare-background")
        assert directory.name.startswith("adare-background-")
        mode = directory.stat()
        assert stat.S_IMODE(mode.st_mode) == 0o700 and mode.st_uid == os.getuid()
        assert other != directory  # never a shared, guessable place
    finally:  # the host's own temporary directory: leave nothing in it
        for made in {directory, other}:
            if made.name.startswith("adare-background-"):
                shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize(
    "escape",
    ["setsid sleep {s} & sleep 60", "(setsid sleep {s} &); sleep 60"],
    ids=["setsid-child", "setsid-orphan"],
)
async def test_a_child_that_called_setsid_dies_with_the_call(client: Any, escape: str) -> None:
    seconds = unique_seconds()
    try:
        result = await client.ok(
            "execute_shell", shell_command=escape.format(s=seconds), timeout=1.5
        )
        assert result["timed_out"] is True
        assert processes_with(f"sleep\0{seconds}") == [], "the setsid child escaped the kill"
    finally:
        for pid in processes_with(f"sleep\0{seconds}"):
            os.kill(pid, signal.SIGKILL)
