"""System tools: ``execute_shell``, ``collect_system_info``, ``get_status``,
``install_dependencies``.

``execute_shell`` returns ``status="success"`` whenever the command ran to its end,
whatever its exit code (read ``returncode``); ``status="error"`` means it could not
be started or hit its timeout (its process group is then killed and the output so
far is returned).

Output is read incrementally and at most ``max_output_bytes`` (default
:data:`~adare_guest.commands.DEFAULT_MAX_OUTPUT`, 16 MiB) of each stream is kept; the
rest is read and counted, not stored (``stdout_truncated``, ``stdout_bytes``). Output
that is valid UTF-8 is returned as text in ``stdout``; anything else travels
losslessly as ``stdout_base64`` (with ``stdout`` empty), never as inflated
replacement text. The mechanism is :mod:`adare_guest.commands`; the facts are
:mod:`adare_guest.system_info`.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import uuid
from pathlib import Path
from typing import Any

from adare_guest import __version__
from adare_guest.commands import (
    DEFAULT_MAX_OUTPUT,
    MAX_OUTPUT_LIMIT,
    Completed,
    ShellError,
    prepare_command,
    run_captured,
    run_foreground,
    spawn_background,
)
from adare_guest.config import AgentConfig
from adare_guest.identity import PROTOCOL_VERSION, bundle_hash
from adare_guest.processes import CALL_MARKER
from adare_guest.protocol import EventType
from adare_guest.system_info import system_info
from adare_guest.tools.base import AgentState, CallContext, ToolGroup, tool

DEFAULT_SHELL_TIMEOUT = 300.0


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
                result.update(
                    await ctx.run_in_thread(spawn_background, spec, command_id, ctx.config.run_dir)
                )
                return result
            completed = await run_foreground(ctx, spec, ctx.timeout, max_output)
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
        info = await ctx.run_in_thread(system_info, ctx.remaining)
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
        probe = await run_captured(ctx, [python, "-m", "pip", "--version"], 60)
        if probe[0] != 0:
            return {
                "status": "error",
                "message": f"pip is not available for {python} "
                f"({_decode(probe[2]).strip()[-200:]}); install python3-pip in the guest",
            }
        await ctx.emit(EventType.PROGRESS, {"message": f"installing {len(deps)} packages"})
        code, out, err = await run_captured(ctx, [*argv, *deps], ctx.timeout)
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


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
