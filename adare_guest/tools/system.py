"""System tools: ``execute_shell``, ``collect_system_info``, ``get_status``,
``install_dependencies``.

``execute_shell`` returns ``status="success"`` whenever the command ran to its end,
whatever its exit code (read ``returncode``); ``status="error"`` means it could not
be started or hit its timeout (its process group is then killed and the output so
far is returned).

Output is read incrementally and at most ``max_output_bytes`` (default
:data:`DEFAULT_MAX_OUTPUT`, 16 MiB) of each stream is kept; the rest is read and
counted, not stored (``stdout_truncated``, ``stdout_bytes``). Output that is valid
UTF-8 is returned as text in ``stdout``; anything else travels losslessly as
``stdout_base64`` (with ``stdout`` empty), never as inflated replacement text.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import importlib
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from adare_guest import __version__
from adare_guest.config import AgentConfig
from adare_guest.identity import PROTOCOL_VERSION, bundle_hash
from adare_guest.protocol import EventType
from adare_guest.tools.base import (
    CALL_MARKER,
    AgentState,
    CallContext,
    Process,
    ToolGroup,
    kill_process_tree,
    tool,
)

DEFAULT_SHELL_TIMEOUT = 300.0
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024
"""Bytes of stdout and of stderr an ``execute_shell`` call keeps by default (each)."""
MAX_OUTPUT_LIMIT = 64 * 1024 * 1024
"""Largest ``max_output_bytes`` a call may ask for."""
READ_BLOCK = 65536
PIPE_DRAIN_SECONDS = 2.0
"""How long output is still read after the command exited (its children may hold the pipes)."""
IS_WINDOWS = sys.platform == "win32"
FAST_SPAWN = hasattr(os, "posix_spawn") and hasattr(os, "pidfd_open")
"""Whether :func:`run_spawned` is available (Linux 5.3+ with Python 3.9+)."""
NO_FAST = "ADARE_NO_FAST_SPAWN"
"""An ``env`` entry that sends a command the ``asyncio`` subprocess way (for comparisons)."""


class ShellError(ValueError):
    """A shell request that cannot be run as asked (bad shell, user, cwd)."""


def shell_argv(command: str, shell: str | bool | None) -> list[str]:
    """The argv that runs ``command``: through the default or a named shell, or
    (``shell=False``) split with :func:`shlex.split` and run directly.

    :raise ShellError: an empty command or an unknown shell.
    """
    if not command.strip():
        raise ShellError("shell_command is empty")
    if shell is False:
        return shlex.split(command, posix=not IS_WINDOWS)
    if shell is None or shell is True:
        if IS_WINDOWS:
            return [os.environ.get("COMSPEC", "cmd.exe"), "/d", "/c", command]
        return ["/bin/sh", "-c", command]
    name = Path(shell).name.lower().removesuffix(".exe")
    if name in ("powershell", "pwsh"):
        return [shell, "-NoProfile", "-NonInteractive", "-Command", command]
    if name == "cmd":
        return [shell, "/d", "/c", command]
    if name in ("sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"):
        return [shell, "-c", command] if name != "busybox" else [shell, "sh", "-c", command]
    raise ShellError(f"unknown shell {shell!r} (use sh, bash, dash, zsh, powershell, pwsh or cmd)")


def build_env(
    env: dict[str, str] | None, inherit_env: bool, tools_paths: list[str]
) -> dict[str, str]:
    """The child environment: inherited (or minimal) + ``env`` + ``tools_paths`` on PATH."""
    if inherit_env:
        result = dict(os.environ)
    else:
        keep = ("SYSTEMROOT", "COMSPEC", "PATHEXT", "TEMP", "TMP") if IS_WINDOWS else ()
        result = {k: os.environ[k] for k in keep if k in os.environ}
        result["PATH"] = os.environ.get("PATH", os.defpath)
    result.update(env or {})
    if tools_paths:
        parts = [p for p in result.get("PATH", "").split(os.pathsep) if p]
        parts += [p for p in tools_paths if p not in parts]
        result["PATH"] = os.pathsep.join(parts)
    return result


def _user_switch(run_as_user: str, env: dict[str, str]) -> dict[str, Any]:
    """Popen kwargs that run the child as ``run_as_user`` (POSIX, agent must be root)."""
    if IS_WINDOWS:
        raise ShellError("run_as_user is not supported on Windows by this agent")
    # Deferred: pwd does not exist on Windows, where this module must still import.
    import pwd

    try:
        entry = pwd.getpwnam(run_as_user)
    except KeyError:
        raise ShellError(f"no such user {run_as_user!r}") from None
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        raise ShellError(f"run_as_user={run_as_user!r} needs the agent to run as root")
    env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    return {
        "user": entry.pw_uid,
        "group": entry.pw_gid,
        "extra_groups": os.getgrouplist(entry.pw_name, entry.pw_gid),
    }


def _admin_prefix(admin: bool) -> list[str]:
    if not admin:
        return []
    if IS_WINDOWS:
        # Deferred: only Windows asks ctypes whether the agent is elevated.
        import ctypes

        if not ctypes.windll.shell32.IsUserAnAdmin():  # type: ignore[attr-defined]
            raise ShellError("admin=True: the agent is not elevated and cannot elevate itself")
        return []
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo is None:
        raise ShellError("admin=True: the agent is not root and sudo is not installed")
    return [sudo, "-n", "--"]


def check_command_text(command: str, cwd: str | None, env: dict[str, str] | None) -> None:
    """Refuse what the OS would refuse only after ``command_start`` was announced.

    :raise ShellError: a NUL byte anywhere, an empty env name or one holding ``=``.
    """
    if "\0" in command:
        raise ShellError("shell_command must not contain NUL bytes")
    if cwd is not None and "\0" in cwd:
        raise ShellError("cwd must not contain NUL bytes")
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key:
            raise ShellError(f"env name {key[:60]!r} must be non-empty, without '=' or NUL")
        if "\0" in value:
            raise ShellError(f"env value of {key[:60]!r} must not contain NUL bytes")


@dataclass
class CommandSpec:
    """How to start one command: argv, working directory, environment, Popen extras."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    popen_kwargs: dict[str, Any]


def prepare_command(
    command: str,
    shell: str | bool | None,
    cwd: str | None,
    env: dict[str, str] | None,
    inherit_env: bool,
    admin: bool,
    run_as_user: str | None,
    tools_paths: list[str],
) -> CommandSpec:
    """Turn ``execute_shell``'s params into a :class:`CommandSpec`.

    :raise ShellError: unknown shell or user, missing ``cwd``, no way to elevate, a NUL
        byte in the command, ``cwd`` or environment, an env name that is empty or has ``=``.
    """
    check_command_text(command, cwd, env)
    child_env = build_env(env, inherit_env, tools_paths)
    popen_kwargs = _user_switch(run_as_user, child_env) if run_as_user else {}
    argv = _admin_prefix(admin) + shell_argv(command, shell)
    if cwd is not None and not os.path.isdir(cwd):
        raise ShellError(f"cwd {cwd!r} is not a directory")
    return CommandSpec(argv, cwd, child_env, popen_kwargs)


@dataclass
class CapturedOutput:
    """One output stream: the first ``limit`` bytes kept, every byte counted.

    >>> out = CapturedOutput(limit=3)
    >>> out.add(b"hello"); (bytes(out.data), out.total, out.truncated)
    (b'hel', 5, True)
    """

    limit: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)

    def result_keys(self, name: str) -> dict[str, Any]:
        """``name`` (text), ``name_base64`` (when not UTF-8), ``name_truncated``,
        ``name_bytes`` (bytes the command wrote, kept or not)."""
        keys: dict[str, Any] = {name: ""}
        text = utf8_text(bytes(self.data), self.truncated)
        if text is None:
            keys[f"{name}_base64"] = base64.b64encode(self.data).decode("ascii")
        else:
            keys[name] = text
        keys[f"{name}_truncated"] = self.truncated
        keys[f"{name}_bytes"] = self.total
        return keys


def utf8_text(data: bytes, truncated: bool = False) -> str | None:
    """``data`` as text when it is valid UTF-8, else None. When the stream was cut at the
    byte limit, a character cut in half at the end is dropped rather than failing.

    >>> utf8_text("é".encode()[:1], truncated=True), utf8_text(b"\\xff")
    ('', None)
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
        return None


@dataclass
class Completed:
    """What a foreground command left: exit status, output, whether we killed it."""

    returncode: int | None
    stdout: CapturedOutput
    stderr: CapturedOutput
    timed_out: bool
    seconds: float

    def as_result(self, budget: float) -> dict[str, Any]:
        """The ``execute_shell`` result keys for this outcome."""
        result: dict[str, Any] = {
            "status": "success",
            "message": f"command exited with {self.returncode}",
            "returncode": self.returncode,
            **self.stdout.result_keys("stdout"),
            **self.stderr.result_keys("stderr"),
            "truncated": self.stdout.truncated or self.stderr.truncated,
            "execution_time": round(self.seconds, 6),
        }
        if self.timed_out:
            # No exit status of its own: returncode stays None so nobody mistakes our
            # kill for the command's answer.
            result.update(
                status="error",
                returncode=None,
                timed_out=True,
                message=f"command timed out after {budget:g} s; process group killed",
            )
        return result


async def run_foreground(
    ctx: CallContext, spec: CommandSpec, max_output: int = DEFAULT_MAX_OUTPUT
) -> Completed:
    """Run ``spec`` within ``ctx.timeout``, keeping at most ``max_output`` bytes of each
    stream; on timeout or cancel its process group and descendants die.

    Where it can (:func:`can_spawn_fast`) the command is started by
    :func:`run_spawned`; otherwise through asyncio's subprocess machinery.

    :raise OSError: the command cannot be started.
    """
    if can_spawn_fast(spec):
        return await run_spawned(ctx, spec, max_output)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *spec.argv,
        cwd=spec.cwd,
        env=spec.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=not IS_WINDOWS,
        **spec.popen_kwargs,
    )
    ctx.track_process(proc)
    stdout, stderr = CapturedOutput(max_output), CapturedOutput(max_output)
    readers = {
        asyncio.ensure_future(_read_into(proc.stdout, stdout)),
        asyncio.ensure_future(_read_into(proc.stderr, stderr)),
    }
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), ctx.timeout)
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        timed_out = True
        kill_process_tree(proc, ctx.call_id)
        await proc.wait()
    finally:
        if proc.returncode is None:
            kill_process_tree(proc, ctx.call_id)
    # Grandchildren that keep the pipes open must not hold the call forever.
    _done, pending = await asyncio.wait(readers, timeout=PIPE_DRAIN_SECONDS)
    for task in pending:
        task.cancel()
    ctx.untrack_process(proc)
    return Completed(proc.returncode, stdout, stderr, timed_out, time.monotonic() - started)


def can_spawn_fast(spec: CommandSpec) -> bool:
    """Whether :func:`run_spawned` can run ``spec``: Linux with pidfds, no ``cwd`` and
    no user switch (``posix_spawn`` has neither here)."""
    return FAST_SPAWN and spec.cwd is None and not spec.popen_kwargs and not spec.env.get(NO_FAST)


class SpawnedProcess:
    """A child started by ``posix_spawn`` and reaped through its pidfd: what
    :func:`~adare_guest.tools.base.kill_process_tree` needs of a process."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.returncode: int | None = None
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    def reap(self) -> None:
        """The pidfd is readable: the child exited; collect its status (once)."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        try:
            _pid, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by someone else: no status to report
            self.returncode = -1
        if not self.exited.done():
            self.exited.set_result(self.returncode)


def _spawn(spec: CommandSpec) -> tuple[SpawnedProcess, int, int]:
    """Start ``spec`` (own session, stdin /dev/null, stdout/stderr pipes); the process
    and the read ends of its pipes (non-blocking).

    Only inheritable descriptors reach the child, and Python opens none (PEP 446), so
    this equals ``subprocess``'s ``close_fds=True`` without its per-call cost.

    :raise OSError: the program cannot be found or started.
    """
    program = spec.argv[0]
    if os.sep not in program:
        found = shutil.which(program, path=spec.env.get("PATH", os.defpath))
        if found is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        program = found
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawn(
            program,
            spec.argv,
            spec.env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsid=True,
        )
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    return SpawnedProcess(pid, os.pidfd_open(pid)), out_r, err_r


def _read_on_loop(fd: int, sink: CapturedOutput) -> asyncio.Future[None]:
    """Read ``fd`` into ``sink`` from the loop's own readiness callbacks (no thread, no
    transport) until end of file; the future is done then, ``fd`` closed."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            chunk = os.read(fd, READ_BLOCK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            sink.add(chunk)
            return
        loop.remove_reader(fd)
        os.close(fd)
        if not done.done():
            done.set_result(None)

    def stop(_future: asyncio.Future[None]) -> None:
        if done.cancelled():
            loop.remove_reader(fd)
            os.close(fd)

    loop.add_reader(fd, readable)
    done.add_done_callback(stop)
    return done


async def run_spawned(ctx: CallContext, spec: CommandSpec, max_output: int) -> Completed:
    """:func:`run_foreground` by ``posix_spawn`` (a vfork-style start, no ``preexec``),
    the pipes read by loop callbacks and the exit seen through a pidfd: no reader
    threads, no child-watcher thread, no ``subprocess`` bookkeeping per call.

    :raise OSError: the command cannot be started.
    """
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    proc, out_fd, err_fd = _spawn(spec)
    loop.add_reader(proc.pidfd, proc.reap)
    # The cast: SpawnedProcess has the pid/returncode/kill() the tracker uses.
    tracked = cast(Process, proc)
    ctx.track_process(tracked)
    stdout, stderr = CapturedOutput(max_output), CapturedOutput(max_output)
    readers = {_read_on_loop(out_fd, stdout), _read_on_loop(err_fd, stderr)}
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(proc.exited), ctx.timeout)
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        timed_out = True
        kill_process_tree(tracked, ctx.call_id)
        await proc.exited
    finally:
        if proc.returncode is None:
            kill_process_tree(tracked, ctx.call_id)
            for reader in readers:
                reader.cancel()
    # Grandchildren that keep the pipes open must not hold the call forever.
    _done, pending = await asyncio.wait(readers, timeout=PIPE_DRAIN_SECONDS)
    for reader in pending:
        reader.cancel()
    ctx.untrack_process(tracked)
    return Completed(proc.returncode, stdout, stderr, timed_out, time.monotonic() - started)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _background_dir(ctx: CallContext) -> Path:
    """``RUN_DIR/background``, else a private new temporary directory (mode 0700, random
    name: a fixed ``/tmp`` path could be prepared by another guest user)."""
    candidate = ctx.config.run_dir / "background"
    try:
        candidate.mkdir(parents=True, exist_ok=True)
        if os.access(candidate, os.W_OK):
            return candidate
    except OSError:
        pass
    # Deferred: only the fallback needs it; start-up stays light.
    import tempfile

    try:
        return Path(tempfile.mkdtemp(prefix="adare-background-"))
    except OSError as exc:
        raise ShellError(f"no writable directory for background command output: {exc}") from None


class SystemTools(ToolGroup):
    """Shell commands and facts about the guest."""

    python_executable: str = sys.executable
    """The interpreter whose pip ``install_dependencies`` runs."""

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        super().__init__(config, state)
        self.dependency_dir = config.run_dir / "site-packages"
        if self.dependency_dir.is_dir():  # installed by an earlier run of the agent
            _add_import_path(self.dependency_dir)

    @tool(timeout=DEFAULT_SHELL_TIMEOUT)
    async def execute_shell(
        self,
        ctx: CallContext,
        *,
        shell_command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        shell: str | bool | None = None,
        inherit_env: bool = True,
        admin: bool = False,
        background: bool = False,
        run_as_user: str | None = None,
        max_output_bytes: int | None = None,
    ) -> dict[str, Any]:
        """Run ``shell_command``; see the module docstring for the result's meaning."""
        command_id = str(uuid.uuid4())
        result: dict[str, Any] = {
            "status": "error",
            "message": "",
            "returncode": None,
            "stdout": "",
            "stderr": "",
            "command_id": command_id,
            "execution_time": 0.0,
        }
        max_output = DEFAULT_MAX_OUTPUT if max_output_bytes is None else max_output_bytes
        try:
            if not 0 <= max_output <= MAX_OUTPUT_LIMIT:
                raise ShellError(
                    f"max_output_bytes must be 0..{MAX_OUTPUT_LIMIT}, got {max_output_bytes}"
                )
            spec = prepare_command(
                shell_command,
                shell,
                cwd,
                env,
                inherit_env,
                admin,
                run_as_user,
                self.config.tools_paths,
            )
        except (ShellError, ValueError) as exc:
            result["message"] = str(exc)
            return result
        if not background:
            # Lets a kill find descendants that left the process group (setsid).
            spec.env[CALL_MARKER] = ctx.call_id
        await ctx.emit(
            EventType.COMMAND_START, {"command_id": command_id, "command": shell_command}
        )
        completed: Completed | None = None
        try:
            if background:
                result.update(await ctx.run_in_thread(_spawn_background, ctx, spec, command_id))
                return result
            completed = await run_foreground(ctx, spec, max_output)
            result.update(completed.as_result(ctx.timeout))
        except (OSError, ShellError, ValueError) as exc:
            result["message"] = f"cannot start {spec.argv[0]!r}: {exc}"
            return result
        finally:
            if not background:
                # Always paired with command_start, whatever happened in between.
                await ctx.emit(
                    EventType.COMMAND_COMPLETE,
                    {
                        "command_id": command_id,
                        "returncode": None if completed is None else completed.returncode,
                        "timed_out": completed is not None and completed.timed_out,
                    },
                )
        return result

    @tool(timeout=10)
    async def get_status(self, ctx: CallContext) -> dict[str, Any]:
        """Agent health: version, platform, uptime, tools."""
        return {
            "status": "success",
            "message": "agent running",
            "version": __version__,
            "platform": sys.platform,
            "uptime": round(ctx.state.uptime(), 3),
            "started_at": ctx.state.started_at,
            "pid": os.getpid(),
            "python": platform.python_version(),
            "protocol_version": PROTOCOL_VERSION,
            "bundle_hash": bundle_hash(),
            "available_tools": list(ctx.state.tool_names),
        }

    @tool(timeout=60)
    async def collect_system_info(self, ctx: CallContext) -> dict[str, Any]:
        """OS, hostname, CPU, memory, disks, network interfaces, installed packages."""
        info = await ctx.run_in_thread(_system_info, ctx)
        return {"status": "success", "message": "system info collected", "system_info": info}

    @tool(timeout=900)
    async def install_dependencies(
        self,
        ctx: CallContext,
        *,
        dependencies: list[str] | str,
        prefer_binary: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``pip install --target RUN_DIR/site-packages``: importable by test functions.

        A target directory keeps the guest's system Python untouched (no PEP 668
        conflict, nothing written outside the run directory) and works for an agent
        started with ``python3 -S``.
        """
        deps = dependencies.split() if isinstance(dependencies, str) else list(dependencies)
        bad = [d for d in deps if not d.strip() or d.lstrip().startswith("-")]
        if bad:
            return {"status": "error", "message": f"not a requirement (options refused): {bad}"}
        if not deps:
            return {"status": "success", "message": "nothing to install", "installed": []}
        python = self.python_executable
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--upgrade"]
        argv += ["--no-warn-script-location", "--target", str(self.dependency_dir)]
        argv += ["--prefer-binary"] if prefer_binary else []
        probe = await _run_captured(ctx, [python, "-m", "pip", "--version"], 60)
        if probe[0] != 0:
            return {
                "status": "error",
                "message": f"pip is not available for {python} "
                f"({_decode(probe[2]).strip()[-200:]}); install python3-pip in the guest",
            }
        await ctx.emit(EventType.PROGRESS, {"message": f"installing {len(deps)} packages"})
        code, out, err = await _run_captured(ctx, [*argv, *deps], ctx.timeout)
        if code == 0:
            _add_import_path(self.dependency_dir)
        return {
            "status": "success" if code == 0 else "error",
            "message": f"pip exited with {code}",
            "returncode": code,
            "stdout": _decode(out),
            "stderr": _decode(err),
            "installed": deps if code == 0 else [],
        }


def _add_import_path(directory: Path) -> None:
    """Make packages under ``directory`` importable by this process (after the agent's own)."""
    entry = str(directory)
    if entry not in sys.path:
        sys.path.append(entry)
    importlib.invalidate_caches()


async def _read_into(stream: asyncio.StreamReader | None, sink: CapturedOutput) -> None:
    """Read ``stream`` to its end into ``sink`` (which keeps what fits and counts the
    rest), block by block, so memory stays bounded however much the command writes."""
    if stream is None:
        return
    while chunk := await stream.read(READ_BLOCK):
        sink.add(chunk)


async def _run_captured(
    ctx: CallContext, argv: list[str], timeout: float
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` tracked by ``ctx``; (returncode, stdout, stderr); -9 on timeout.

    At most :data:`DEFAULT_MAX_OUTPUT` bytes of each stream are kept.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=not IS_WINDOWS,
    )
    ctx.track_process(proc)
    out, err = CapturedOutput(DEFAULT_MAX_OUTPUT), CapturedOutput(DEFAULT_MAX_OUTPUT)
    try:
        await asyncio.wait_for(
            asyncio.gather(_read_into(proc.stdout, out), _read_into(proc.stderr, err), proc.wait()),
            timeout,
        )
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        kill_process_tree(proc, ctx.call_id)
        await proc.wait()
        return -9, b"", f"timed out after {timeout:g} s".encode()
    finally:
        ctx.untrack_process(proc)
    code = proc.returncode if proc.returncode is not None else -1
    return code, bytes(out.data), bytes(err.data)


def _spawn_background(ctx: CallContext, spec: CommandSpec, command_id: str) -> dict[str, Any]:
    """Start a detached command whose output goes to files; a daemon thread reaps it."""
    out_dir = _background_dir(ctx)
    stdout_path = out_dir / f"{command_id}.stdout"
    stderr_path = out_dir / f"{command_id}.stderr"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=not IS_WINDOWS,
            **spec.popen_kwargs,
        )
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return {
        "status": "success",
        "message": f"started in the background as pid {proc.pid}",
        "pid": proc.pid,
        "stdout_path": str(stdout_path),
        "stderr_path": str(stderr_path),
    }


def _system_info(ctx: CallContext) -> dict[str, Any]:
    uname = platform.uname()
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "system": uname.system,
        "release": uname.release,
        "version": uname.version,
        "machine": uname.machine,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "cpu_count": os.cpu_count(),
        "agent_version": __version__,
        "boot_time": _boot_time(),
        "os_release": _os_release(),
        "memory": _meminfo(),
        "disks": _disks(),
        "network_interfaces": _interfaces(),
        "users": _users(),
    }
    info["packages"] = _packages(ctx)
    return info


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def _os_release() -> dict[str, str]:
    reader = getattr(platform, "freedesktop_os_release", read_os_release)  # 3.10 and later
    try:
        return dict(reader())
    except OSError:
        return {}


OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")
"""Where os-release(5) is looked for, in order (``/etc`` wins)."""
_OS_RELEASE_LINE = re.compile(
    r"""^(?P<name>[a-zA-Z0-9_]+)=(?P<quote>["']?)(?P<value>.*)(?P=quote)$"""
)
_OS_RELEASE_ESCAPE = re.compile(r"""\\([\\$"'`])""")  # the five characters os-release escapes


def parse_os_release(lines: Iterable[str]) -> dict[str, str]:
    """The fields of os-release(5) ``lines``, parsed like Python 3.10's
    ``platform.freedesktop_os_release`` (defaults for ``NAME``, ``ID``, ``PRETTY_NAME``)."""
    info = {"NAME": "Linux", "ID": "linux", "PRETTY_NAME": "Linux"}
    for line in lines:
        found = _OS_RELEASE_LINE.match(line)
        if found is not None:
            info[found.group("name")] = _OS_RELEASE_ESCAPE.sub(r"\1", found.group("value"))
    return info


def read_os_release(candidates: Sequence[str] = OS_RELEASE_FILES) -> dict[str, str]:
    """``platform.freedesktop_os_release()`` for Pythons before 3.10 (the guest's 3.9).

    :raise OSError: no candidate file can be read.
    """
    error: OSError | None = None
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as handle:
                return parse_os_release(handle)
        except OSError as exc:
            error = exc
    raise OSError(error.errno if error else None, f"Unable to read files {', '.join(candidates)}")


def _meminfo() -> dict[str, int]:
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if key in ("MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree") and parts:
                fields[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        pass
    return fields


def _disks() -> list[dict[str, Any]]:
    roots = ["C:\\"] if IS_WINDOWS else ["/"]
    disks = []
    for root in roots:
        try:
            usage = shutil.disk_usage(root)
        except OSError:
            continue
        disks.append({"path": root, "total": usage.total, "used": usage.used, "free": usage.free})
    return disks


def _interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return []


def _users() -> list[str]:
    if IS_WINDOWS:
        return []
    # Deferred: pwd does not exist on Windows, where this module must still import.
    import pwd

    return sorted(e.pw_name for e in pwd.getpwall() if e.pw_uid == 0 or e.pw_uid >= 1000)


def _packages(ctx: CallContext) -> dict[str, Any]:
    """Installed OS packages (dpkg or rpm), bounded in time."""
    for argv, manager in (
        (["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], "dpkg"),
        (["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], "rpm"),
    ):
        if shutil.which(argv[0]) is None:
            continue
        try:
            out = subprocess.run(
                argv,
                capture_output=True,
                timeout=max(1.0, min(30.0, ctx.remaining() - 1)),
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {"manager": manager, "error": "listing packages failed or timed out"}
        items = dict(line.split("\t", 1) for line in _decode(out).splitlines() if "\t" in line)
        return {"manager": manager, "count": len(items), "installed": items}
    return {"manager": None, "count": 0, "installed": {}}
