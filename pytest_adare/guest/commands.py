"""The facade's commands: ``shell`` in the guest, and ``succeed``/``fail`` over it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adare_guest.tool_names import EXECUTE_SHELL
from pytest_adare.errors import CommandSucceeded
from pytest_adare.guest.core import GuestCore
from pytest_adare.guest.results import ShellResult


class GuestCommands(GuestCore):
    """Commands in the guest's shell: their result, or one that must succeed or fail."""

    async def shell(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        admin: bool = False,
        run_as_user: str | None = None,
        max_output_bytes: int | None = None,
        background: bool = False,
    ) -> ShellResult:
        """Run ``command`` in the guest's shell and return rc, stdout and stderr.

        A non-zero exit is not an error here: call ``.check()`` for that.
        ``background=True`` starts it detached and returns at once: ``.pid``, and its
        output goes to the files ``.stdout_path`` / ``.stderr_path`` in the guest.
        ``max_output_bytes`` caps what the agent keeps of each stream (its default:
        16 MiB; at most 64 MiB); the rest is counted, and ``.truncated`` says so.

        :raise ToolError: the command could not run at all (or timed out without a
            code), or the agent's result is malformed.
        """
        params: dict[str, Any] = {"shell_command": command}
        if cwd is not None:
            params["cwd"] = cwd
        if env is not None:
            params["env"] = dict(env)
        if timeout is not None:
            params["timeout"] = timeout
        if admin:
            params["admin"] = True
        if run_as_user is not None:
            params["run_as_user"] = run_as_user
        if max_output_bytes is not None:
            params["max_output_bytes"] = max_output_bytes
        if background:
            params["background"] = True
        # The connection's call, not self.call: ``timeout`` is the tool's param here (the
        # agent ends the command and answers; the host waits that long plus a grace).
        result = await self.on_home_loop(self._connection.call(EXECUTE_SHELL, params, None))
        return ShellResult.from_result(command, result)

    async def succeed(self, command: str, /, **shell_options: Any) -> str:
        """Run ``command`` (with :meth:`shell`'s options); its stdout when it exits 0.

        :raise CommandFailed: it exited non-zero (command, exit code, stdout, stderr).
        """
        return (await self.shell(command, **shell_options)).check().stdout

    async def fail(self, command: str, /, **shell_options: Any) -> ShellResult:
        """Run ``command``; its result when it exits non-zero (stderr usually says why).

        :raise CommandSucceeded: it exited 0.
        """
        result = await self.shell(command, **shell_options)
        if result.ok:
            raise CommandSucceeded(result)
        return result
