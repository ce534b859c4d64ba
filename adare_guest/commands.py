"""Running a guest command: its argv and environment, its output, its end.

The mechanism under ``execute_shell`` (and ``install_dependencies``), free of the
tool plumbing: a :class:`CommandSpec` is prepared from the call's params
(:func:`prepare_command`), run in the foreground with bounded output
(:func:`run_foreground`: ``posix_spawn`` + a pidfd where the kernel has them, else
asyncio's subprocesses), or detached with its output in files
(:func:`spawn_background`). Whatever runs is tracked by a
:class:`~adare_guest.processes.ProcessTracker` (a call's context), so a cancelled call
kills its whole process tree.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from adare_guest.processes import (
    CHILD_DEFAULT_SIGNALS,
    Process,
    ProcessTracker,
    kill_process_tree,
)

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
    tracker: ProcessTracker,
    spec: CommandSpec,
    timeout: float,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> Completed:
    """Run ``spec`` within ``timeout`` seconds, keeping at most ``max_output`` bytes of each
    stream; on timeout or cancel its process group and descendants die.

    Where it can (:func:`can_spawn_fast`) the command is started by
    :func:`run_spawned`; otherwise through asyncio's subprocess machinery.

    :raise OSError: the command cannot be started.
    """
    if can_spawn_fast(spec):
        return await run_spawned(tracker, spec, timeout, max_output)
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
    tracker.track_process(proc)
    stdout, stderr = CapturedOutput(max_output), CapturedOutput(max_output)
    readers = {
        asyncio.ensure_future(_read_into(proc.stdout, stdout)),
        asyncio.ensure_future(_read_into(proc.stderr, stderr)),
    }
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        timed_out = True
        kill_process_tree(proc, tracker.call_id)
        await proc.wait()
    finally:
        if proc.returncode is None:
            kill_process_tree(proc, tracker.call_id)
    # Grandchildren that keep the pipes open must not hold the call forever.
    _done, pending = await asyncio.wait(readers, timeout=PIPE_DRAIN_SECONDS)
    for task in pending:
        task.cancel()
    tracker.untrack_process(proc)
    return Completed(proc.returncode, stdout, stderr, timed_out, time.monotonic() - started)


def can_spawn_fast(spec: CommandSpec) -> bool:
    """Whether :func:`run_spawned` can run ``spec``: Linux with pidfds, no ``cwd`` and
    no user switch (``posix_spawn`` has neither here)."""
    return FAST_SPAWN and spec.cwd is None and not spec.popen_kwargs and not spec.env.get(NO_FAST)


class SpawnedProcess:
    """A child started by ``posix_spawn`` and reaped through its pidfd: what
    :func:`~adare_guest.processes.kill_process_tree` needs of a process."""

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
            setsigdef=CHILD_DEFAULT_SIGNALS,
            setsigmask=(),
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


async def run_spawned(
    tracker: ProcessTracker, spec: CommandSpec, timeout: float, max_output: int
) -> Completed:
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
    tracker.track_process(tracked)
    stdout, stderr = CapturedOutput(max_output), CapturedOutput(max_output)
    readers = {_read_on_loop(out_fd, stdout), _read_on_loop(err_fd, stderr)}
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(proc.exited), timeout)
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        timed_out = True
        kill_process_tree(tracked, tracker.call_id)
        await proc.exited
    finally:
        if proc.returncode is None:
            kill_process_tree(tracked, tracker.call_id)
            for reader in readers:
                reader.cancel()
    # Grandchildren that keep the pipes open must not hold the call forever.
    _done, pending = await asyncio.wait(readers, timeout=PIPE_DRAIN_SECONDS)
    for reader in pending:
        reader.cancel()
    tracker.untrack_process(tracked)
    return Completed(proc.returncode, stdout, stderr, timed_out, time.monotonic() - started)


def background_dir(run_dir: Path) -> Path:
    """``RUN_DIR/background``, else a private new temporary directory (mode 0700, random
    name: a fixed ``/tmp`` path could be prepared by another guest user)."""
    candidate = run_dir / "background"
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


async def _read_into(stream: asyncio.StreamReader | None, sink: CapturedOutput) -> None:
    """Read ``stream`` to its end into ``sink`` (which keeps what fits and counts the
    rest), block by block, so memory stays bounded however much the command writes."""
    if stream is None:
        return
    while chunk := await stream.read(READ_BLOCK):
        sink.add(chunk)


async def run_captured(
    tracker: ProcessTracker, argv: list[str], timeout: float
) -> tuple[int, bytes, bytes]:
    """Run ``argv`` tracked by ``tracker``; (returncode, stdout, stderr); -9 on timeout.

    At most :data:`DEFAULT_MAX_OUTPUT` bytes of each stream are kept.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=not IS_WINDOWS,
    )
    tracker.track_process(proc)
    out, err = CapturedOutput(DEFAULT_MAX_OUTPUT), CapturedOutput(DEFAULT_MAX_OUTPUT)
    try:
        await asyncio.wait_for(
            asyncio.gather(_read_into(proc.stdout, out), _read_into(proc.stderr, err), proc.wait()),
            timeout,
        )
    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11
        kill_process_tree(proc, tracker.call_id)
        await proc.wait()
        return -9, b"", f"timed out after {timeout:g} s".encode()
    finally:
        tracker.untrack_process(proc)
    code = proc.returncode if proc.returncode is not None else -1
    return code, bytes(out.data), bytes(err.data)


def spawn_background(spec: CommandSpec, command_id: str, run_dir: Path) -> dict[str, Any]:
    """Start a detached command whose output goes to files; a daemon thread reaps it."""
    out_dir = background_dir(run_dir)
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
