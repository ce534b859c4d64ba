"""System tools over a real WebSocket with real subprocesses."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from adare_guest import __version__
from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer

pytestmark = pytest.mark.asyncio


def _alive(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


async def test_shell_returns_stdout_stderr_and_returncode_separately(client: Any) -> None:
    result = await client.ok("execute_shell", shell_command="echo hi; echo oops >&2; exit 3")
    assert (result["returncode"], result["stdout"], result["stderr"]) == (3, "hi\n", "oops\n")
    assert result["status"] == "success" and result["message"] == "command exited with 3"
    assert set(result) >= {"command_id", "execution_time"}
    assert result["execution_time"] > 0


async def test_shell_emits_start_and_complete_events_carrying_the_call_id(client: Any) -> None:
    call_id = await client.send_call("execute_shell", {"shell_command": "true"})
    result = (await client.result(call_id))["result"]
    kinds = [e["event_type"] for e in client.events(call_id)]
    assert kinds == ["command_start", "command_complete"]
    assert all(e["data"]["command_id"] == result["command_id"] for e in client.events(call_id))


async def test_undecodable_output_travels_losslessly_as_base64(client: Any) -> None:
    result = await client.ok("execute_shell", shell_command=r"printf '\377ok'; printf '\376' >&2")
    assert (result["stdout"], result["stderr"]) == ("", "")
    assert base64.b64decode(result["stdout_base64"]) == b"\377ok"
    assert base64.b64decode(result["stderr_base64"]) == b"\376"


async def test_timeout_kills_the_whole_process_group_and_keeps_partial_output(
    client: Any,
) -> None:
    marker = f"77{time.time_ns() % 10**7}"
    started = time.monotonic()
    result = await client.ok(
        "execute_shell",
        shell_command=f"echo before; sleep {marker} & sleep {marker}1; echo never",
        timeout=1.0,
    )
    assert time.monotonic() - started < 5
    assert result["status"] == "error" and result["timed_out"] is True
    assert "timed out after 1 s" in result["message"]
    assert result["stdout"] == "before\n" and result["returncode"] is None
    for _ in range(100):
        if not _alive(marker):
            break
        await asyncio.sleep(0.05)
    assert _alive(marker) == []


async def test_cwd_env_and_inherit_env(client: Any, tmp_path: Path) -> None:
    result = await client.ok(
        "execute_shell",
        shell_command="pwd; echo $ADARE_X",
        cwd=str(tmp_path),
        env={"ADARE_X": "v=1"},
    )
    assert result["stdout"] == f"{tmp_path}\nv=1\n"
    os.environ["ADARE_INHERITED"] = "yes"
    try:
        inherited = await client.ok("execute_shell", shell_command="echo ${ADARE_INHERITED:-no}")
        clean = await client.ok(
            "execute_shell", shell_command="echo ${ADARE_INHERITED:-no}", inherit_env=False
        )
    finally:
        del os.environ["ADARE_INHERITED"]
    assert (inherited["stdout"], clean["stdout"]) == ("yes\n", "no\n")
    missing = await client.ok("execute_shell", shell_command="true", cwd=str(tmp_path / "nope"))
    assert missing["status"] == "error" and "is not a directory" in missing["message"]


async def test_tools_paths_are_appended_to_path(
    tmp_path: Path, agent_config: AgentConfig, strict_client_class: Any
) -> None:
    from websockets.asyncio.client import connect

    tools = tmp_path / "tools"
    tools.mkdir()
    script = tools / "adare-hello-tool"
    script.write_text("#!/bin/sh\necho hello from tools\n")
    script.chmod(0o755)
    agent_config.tools_paths = [str(tools)]
    server = AdareVMServer(agent_config)
    _host, port = await server.start()
    client = strict_client_class(await connect(f"ws://127.0.0.1:{port}", max_size=None))
    try:
        result = await client.ok("execute_shell", shell_command="adare-hello-tool; echo $PATH")
        out = result["stdout"].splitlines()
        assert out[0] == "hello from tools" and out[1].endswith(f":{tools}")
    finally:
        await client.close()
        await server.stop()


@pytest.mark.parametrize(
    ("params", "stdout"),
    [
        ({"shell": False, "shell_command": "printf '%s|' 'a b' c"}, "a b|c|"),
        ({"shell": "bash", "shell_command": "echo ${BASH_VERSION:+bash}"}, "bash\n"),
        ({"shell": True, "shell_command": "echo $((1+2))"}, "3\n"),
    ],
)
async def test_shell_choice(client: Any, params: dict[str, Any], stdout: str) -> None:
    assert (await client.ok("execute_shell", **params))["stdout"] == stdout


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"shell": "fish", "shell_command": "true"}, "unknown shell 'fish'"),
        ({"shell_command": "   "}, "shell_command is empty"),
        ({"shell": False, "shell_command": "/nonexistent/binary"}, "cannot start"),
        ({"run_as_user": "no-such-user-adare", "shell_command": "true"}, "no such user"),
    ],
)
async def test_shell_requests_that_cannot_run_are_tool_errors(
    client: Any, params: dict[str, Any], fragment: str
) -> None:
    result = await client.ok("execute_shell", **params)
    assert result["status"] == "error" and fragment in result["message"]
    assert result["returncode"] is None


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_run_as_user_and_admin(client: Any) -> None:
    nobody = await client.ok(
        "execute_shell", shell_command="id -u; echo $HOME", run_as_user="nobody"
    )
    assert nobody["stdout"] == "65534\n/nonexistent\n"
    admin = await client.ok("execute_shell", shell_command="id -u", admin=True)
    assert admin["stdout"] == "0\n"


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


async def test_background_commands_return_at_once_and_keep_running(
    client: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "flag"
    result = await client.ok(
        "execute_shell", shell_command=f"sleep 0.5; echo done > {flag}; echo out", background=True
    )
    assert result["status"] == "success" and result["pid"] > 0
    assert _read(flag) == ""
    for _ in range(100):
        if _read(flag) == "done\n" and _read(result["stdout_path"]) == "out\n":
            break
        await asyncio.sleep(0.05)
    assert (_read(flag), _read(result["stdout_path"])) == ("done\n", "out\n")


async def test_get_status_reports_version_platform_uptime(client: Any) -> None:
    first = await client.ok("get_status")
    await asyncio.sleep(0.05)
    second = await client.ok("get_status")
    assert first["version"] == __version__ and first["platform"] == sys.platform
    assert second["uptime"] > first["uptime"] >= 0
    assert "execute_shell" in first["available_tools"]


async def test_collect_system_info(client: Any) -> None:
    info = (await client.ok("collect_system_info", _wait=60))["system_info"]
    assert info["hostname"] == os.uname().nodename
    assert info["machine"] == os.uname().machine
    assert info["memory"]["MemTotal"] > 0
    assert info["cpu_count"] == os.cpu_count()
    assert info["disks"][0]["total"] > 0
    assert info["packages"]["manager"] in ("dpkg", "rpm", None)


def _tiny_wheel(directory: Path, name: str) -> Path:
    """A minimal valid pure-Python wheel, built by hand (no network, no build backend)."""
    dist = f"{name}-0.1"
    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode()
        ),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    wheel = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def _make_venv_without_pip(path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )


def _python_output(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout


async def test_install_dependencies_installs_under_the_run_dir_importable_by_the_agent(
    client: Any, agent_config: Any, tmp_path: Path
) -> None:
    name = "adare_dummy_dep"
    wheel = _tiny_wheel(tmp_path, name)
    result = await client.ok("install_dependencies", dependencies=[str(wheel)], _wait=300)
    assert result["status"] == "success", result["stderr"]
    target = agent_config.run_dir / "site-packages"
    assert (target / f"{name}.py").is_file()
    # The agent (in this process) imports it now; the system Python is untouched.
    assert str(target) in sys.path
    module = importlib.import_module(name)
    assert module.VALUE == 42
    outside = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", f"import {name}"], capture_output=True
    )
    assert outside.returncode != 0, "the host/system Python must not see the dependency"
    sys.modules.pop(name, None)
    sys.path.remove(str(target))


async def test_install_dependencies_refuses_options_and_handles_nothing(client: Any) -> None:
    refused = await client.ok("install_dependencies", dependencies=["--index-url=http://x", "a"])
    assert refused["status"] == "error" and "options refused" in refused["message"]
    empty = await client.ok("install_dependencies", dependencies=[])
    assert empty == {"status": "success", "message": "nothing to install", "installed": []}


async def test_install_dependencies_says_so_when_pip_is_missing(
    tmp_path: Path, agent_config: AgentConfig, strict_client_class: Any
) -> None:
    from websockets.asyncio.client import connect

    from adare_guest.tools.system import SystemTools

    _make_venv_without_pip(tmp_path / "venv")

    class NoPipSystemTools(SystemTools):
        python_executable = str(tmp_path / "venv" / "bin" / "python")

    server = AdareVMServer(agent_config, groups=[NoPipSystemTools])
    _host, port = await server.start()
    client = strict_client_class(await connect(f"ws://127.0.0.1:{port}", max_size=None))
    try:
        result = await client.ok("install_dependencies", dependencies=["anything"])
    finally:
        await client.close()
        await server.stop()
    assert result["status"] == "error"
    assert "pip is not available" in result["message"] and "python3-pip" in result["message"]
