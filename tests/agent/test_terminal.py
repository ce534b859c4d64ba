"""The agent's terminal (``open_terminal``) against the real agent, over WebSocket and serial.

A shell on a pty in the "guest" (this host), driven through :class:`RemoteTerminal`:
what is typed is echoed and run, Ctrl-C reaches the program and not the shell, the
window size arrives, output a host does not read stops the program, and closing either
end leaves no process behind.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from test_serial_transport import PtyAgent, pty_agent  # noqa: F401 (a fixture)

from adare_guest.server import AdareVMServer
from adare_guest.terminal import READ_SIZE, user_environment
from pytest_adare.agent.call_router import CallRouter
from pytest_adare.agent.serial_client import SerialAgentClient
from pytest_adare.agent.terminal import RemoteTerminal
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import AgentUnreachable, ToolError
from pytest_adare.interactive import registry
from pytest_adare.interactive.owner import OwnerServer

pytestmark = pytest.mark.asyncio

WAIT = 15.0
SHELL = ["/bin/sh"]


@pytest_asyncio.fixture
async def websocket_client(agent: AdareVMServer) -> AsyncIterator[CallRouter]:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], None)
    yield client
    await client.close()


@pytest_asyncio.fixture
async def serial_client(pty_agent: PtyAgent) -> AsyncIterator[CallRouter]:  # noqa: F811
    client = await SerialAgentClient.attach(pty_agent.channel())
    yield client
    await client.close()


@pytest.fixture(params=["websocket", "serial"])
def connection(request: pytest.FixtureRequest) -> CallRouter:
    client: CallRouter = request.getfixturevalue(f"{request.param}_client")
    return client


async def read_until(terminal: RemoteTerminal, marker: bytes, timeout: float = WAIT) -> bytes:
    """Output up to and including ``marker``."""
    seen = b""

    async def scan() -> bytes:
        nonlocal seen
        while marker not in seen:
            chunk = await terminal.read()
            if not chunk:
                raise AssertionError(f"terminal ended before {marker!r}; output: {seen!r}")
            seen += chunk
        return seen

    try:
        return await asyncio.wait_for(scan(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"no {marker!r} within {timeout} s; output: {seen[-500:]!r}") from None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def gone(pid: int, timeout: float = 5.0) -> bool:
    for _ in range(int(timeout / 0.05)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not alive(pid)


async def test_typed_command_is_echoed_and_run_and_exit_status_comes_back(
    connection: CallRouter,
) -> None:
    terminal = await RemoteTerminal.open(connection, SHELL)
    await terminal.write(b"echo sum-$((40+2))\n")
    output = await read_until(terminal, b"sum-42\r\n")
    assert b"echo sum-$((40+2))" in output  # the pty echoed what was typed
    await terminal.write(b"exit 3\n")
    assert await asyncio.wait_for(terminal.wait(), WAIT) == 3
    assert await gone(terminal.info["pid"])


def foreground_child(shell: int, name: str) -> bool:
    """Whether a child ``name`` of ``shell`` runs as its terminal's foreground job."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # not a process, or gone meanwhile
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session tty tpgid
        if comm == name and int(fields[1]) == shell and fields[2] == fields[5]:
            return True
    return False


async def test_ctrl_c_interrupts_the_program_and_the_shell_stays(connection: CallRouter) -> None:
    terminal = await RemoteTerminal.open(connection, SHELL)
    await terminal.write(b"sleep 30; echo sl$((1))ept\n")
    # ^C before the shell has made sleep the foreground job would reach the shell, not
    # sleep (a fixed pause lost that race on a loaded host): wait until sleep runs.
    shell = int(terminal.info["pid"])
    for _ in range(int(WAIT / 0.05)):
        if foreground_child(shell, "sleep"):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"sleep 30 never ran in the foreground of shell {shell}")
    started = time.monotonic()
    await terminal.write(b"\x03")
    await terminal.write(b"echo still-$((1+1))\n")
    output = await read_until(terminal, b"still-2\r\n")
    assert time.monotonic() - started < 10
    assert b"sl1ept" not in output
    await terminal.close()
    await asyncio.wait_for(terminal.wait(), WAIT)


async def test_the_program_starts_with_no_signal_ignored(connection: CallRouter) -> None:
    # As under a CI script's `&`: the agent's process ignores SIGINT (and Python, SIGPIPE).
    # The terminal's program must not inherit either, or ^C would stop nothing.
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        terminal = await RemoteTerminal.open(connection, SHELL)
        await terminal.write(b"grep SigIgn /proc/self/status; echo do$((1))ne\n")
        output = await read_until(terminal, b"do1ne\r\n")
    finally:
        signal.signal(signal.SIGINT, before)
    line = next(
        (part for part in output.decode().splitlines() if "SigIgn:\t" in part), repr(output)
    )
    assert int(line.split()[-1], 16) & ((1 << 31) - 1) == 0, line
    await terminal.close()
    await asyncio.wait_for(terminal.wait(), WAIT)


async def test_window_size_and_resize_reach_the_pty(connection: CallRouter) -> None:
    terminal = await RemoteTerminal.open(connection, SHELL, rows=30, cols=90)
    await terminal.write(b"stty size\n")
    await read_until(terminal, b"30 90\r\n")
    await terminal.resize(41, 123)
    await terminal.write(b"stty size\n")
    await read_until(terminal, b"41 123\r\n")
    await terminal.close()
    await asyncio.wait_for(terminal.wait(), WAIT)


async def test_signal_goes_to_the_foreground_program(connection: CallRouter) -> None:
    terminal = await RemoteTerminal.open(connection, ["sleep", "60"])
    await asyncio.sleep(0.3)
    await terminal.signal(signal.SIGTERM)
    await asyncio.wait_for(terminal.wait(), WAIT)
    assert terminal.exit_signal == signal.SIGTERM


async def test_output_the_host_does_not_read_stops_the_program(
    connection: CallRouter, tmp_path: Path
) -> None:
    progress = tmp_path / "written"
    # The count is renamed into place: a read never sees the file between truncate and write.
    script = (
        f"i=0; while :; do head -c 65536 /dev/zero; i=$((i+1)); "
        f"echo $i > {progress}.new; mv {progress}.new {progress}; done"
    )
    window = 64 * 1024
    terminal = await RemoteTerminal.open(connection, ["sh", "-c", script], window=window)
    await asyncio.sleep(2.0)  # read nothing

    def written() -> int:
        return int(progress.read_text() or 0) * 65536 if progress.exists() else 0

    stalled = written()
    # The window, one read, and what the kernel's pty buffer holds: nothing without end.
    assert stalled <= window + READ_SIZE + 256 * 1024
    await asyncio.sleep(0.5)
    assert written() == stalled
    received = 0
    while received < 4 * 2**20:
        received += len(await asyncio.wait_for(terminal.read(), WAIT))
    assert written() > stalled  # reading let it go on
    await terminal.close()
    await asyncio.wait_for(terminal.wait(), WAIT)
    assert await gone(terminal.info["pid"])


async def test_host_close_hangs_up_every_process_of_the_terminal(
    connection: CallRouter, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    terminal = await RemoteTerminal.open(connection, SHELL)
    await terminal.write(f"sleep 300 & echo $! > {pidfile}; echo st$((1))arted\n".encode())
    await read_until(terminal, b"st1arted\r\n")
    background = int(pidfile.read_text())
    await terminal.close()
    await asyncio.wait_for(terminal.wait(), WAIT)
    assert await gone(terminal.info["pid"])
    assert await gone(background)


async def test_a_closed_connection_ends_the_terminal_and_its_program(
    agent: AdareVMServer,
) -> None:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], None)
    terminal = await RemoteTerminal.open(client, ["sleep", "300"])
    await client.close()
    assert await gone(terminal.info["pid"], timeout=10)
    assert terminal.ended


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_run_as_user_runs_the_shell_as_that_user(connection: CallRouter) -> None:
    terminal = await RemoteTerminal.open(connection, SHELL, run_as_user="nobody")
    assert terminal.info["user"] == "nobody"
    await terminal.write(b"id -un; tty\n")
    output = await read_until(terminal, b"/dev/pts/")
    assert b"nobody\r\n" in output
    await terminal.write(b"exit\n")
    await asyncio.wait_for(terminal.wait(), WAIT)


async def test_bad_requests_are_refused_by_name(connection: CallRouter) -> None:
    with pytest.raises(ToolError, match="no such user 'no-such-user'"):
        await RemoteTerminal.open(connection, SHELL, run_as_user="no-such-user")
    with pytest.raises(ToolError, match="window size"):
        await RemoteTerminal.open(connection, SHELL, rows=0)
    terminal = await RemoteTerminal.open(connection, ["/no/such/program"])
    output = await read_until(terminal, b"cannot run /no/such/program")
    assert b"No such file" in output
    assert await asyncio.wait_for(terminal.wait(), WAIT) == 127


async def test_the_terminal_tool_needs_the_token(agent: AdareVMServer) -> None:
    agent.config.token = "sesame"
    assert agent.listen_address is not None
    with pytest.raises(AgentUnreachable, match="rejected our token"):
        await AgentClient.connect("127.0.0.1", agent.listen_address[1], None, attempts=1)
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], "sesame")
    try:
        terminal = await RemoteTerminal.open(client, ["true"])
        assert await asyncio.wait_for(terminal.wait(), WAIT) == 0
    finally:
        await client.close()


class LocalReach:
    """An owner's view of this host's agent (what ``adare-vm run`` serves of a VM)."""

    def __init__(self, connection: CallRouter) -> None:
        self._connection = connection

    def connection(self) -> CallRouter:
        return self._connection

    async def screen_png(self) -> bytes:
        raise NotImplementedError


@pytest_asyncio.fixture
async def local_vm(
    connection: CallRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """This host's agent registered as ``adare-vm run`` registers a VM; its name."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    entry = registry.claim(
        "vm", registry.Entry(name="", image="local", owner="test", owner_pid=os.getpid())
    )
    server = OwnerServer(LocalReach(connection), entry.socket, lambda: None)
    await server.start()
    try:
        yield entry.name
    finally:
        await server.close()
        registry.remove(entry.name)


async def adare_vm_shell(*args: str) -> tuple[int | None, str]:
    """``adare-vm shell ARGS`` scripted (no tty): its status and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest_adare.interactive.cli", "shell", *args,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT)
    return proc.returncode, out.decode()


async def test_adare_vm_shell_takes_user_after_the_name_and_the_commands_own_dashes(
    local_vm: str,
) -> None:
    """``adare-vm shell NAME --user U -- CMD``: the option is adare-vm's, not the
    command's (it once became the command: ``exec: --user: not found``), and what
    follows ``--`` is the command's, its own ``--`` and options included."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    script = ["sh", "-c", 'echo "$(id -un) $*"', "sh", "--", "-x", "--user", "y"]
    expected = (0, f"{me} -- -x --user y\n")
    assert await adare_vm_shell(local_vm, "--user", me, "--", *script) == expected
    assert await adare_vm_shell("--user", me, local_vm, "--", *script) == expected
    assert await adare_vm_shell(local_vm, "--", "sh", "-c", "exit 7") == (7, "")


async def test_adare_vm_shell_runs_one_argument_as_a_shell_command_line(local_vm: str) -> None:
    """``-- 'echo one; ...'`` is a command line for ``sh -c`` (it ran as one program's
    name: exit 127); several arguments stay a program and its arguments."""
    line = "echo one; echo two | tr a-z A-Z; exit 3"
    assert await adare_vm_shell(local_vm, "--", line) == (3, "one\nTWO\n")
    assert await adare_vm_shell(local_vm, "--", "echo", "a;", "b") == (0, "a; b\n")
    assert await adare_vm_shell(local_vm, "--", "true") == (0, "")


async def test_a_name_without_its_run_does_while_one_run_has_it(local_vm: str) -> None:
    """``vm0`` finds ``vm0@RUN``; once a second run has a ``vm0`` it is refused with both."""
    assert local_vm == f"vm0@{os.getpid()}"
    assert await adare_vm_shell("vm0", "--", "echo", "in") == (0, "in\n")
    other = registry.claim(
        "vm", registry.Entry(name="", image="local", owner="run B", owner_pid=os.getpid(), run="B")
    )
    try:
        assert other.name == "vm0@B"  # its own vm0, not vm1
        status, said = await adare_vm_shell("vm0", "--", "true")
        assert status == 2 and "2 runs have a VM named 'vm0'" in said, said
        assert f"{local_vm} (test)" in said and "vm0@B (run B)" in said
        assert await adare_vm_shell(local_vm, "--", "echo", "in") == (0, "in\n")
    finally:
        registry.remove(other.name)


async def test_a_terminal_as_the_desktop_sessions_user_gets_the_sessions_environment(
    tmp_path: Path,
) -> None:
    """The built-in desktop's session file: its user's terminal reaches the screen and
    the session bus (as ``guest.user.run`` does); another user's gets none of it."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    session = tmp_path / "session.env"
    session.write_text(
        f"USER={me}\nDISPLAY=:0\nDBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus\n"
        "XDG_SESSION_TYPE=x11\nSHELL=/bin/false\nTERM=vt102\n"
    )
    env, _, _, shell = user_environment(me, "xterm-256color", {"EXTRA": "1"}, str(session))
    assert env["DISPLAY"] == ":0" and env["XDG_SESSION_TYPE"] == "x11"
    assert env["DBUS_SESSION_BUS_ADDRESS"] == "unix:path=/run/user/1000/bus"
    assert (env["TERM"], env["SHELL"], env["EXTRA"]) == ("xterm-256color", shell, "1")
    session.write_text("USER=someone-else\nDISPLAY=:0\n")
    assert "DISPLAY" not in user_environment(me, "xterm", None, str(session))[0]
    assert "DISPLAY" not in user_environment(me, "xterm", None, str(tmp_path / "none"))[0]
