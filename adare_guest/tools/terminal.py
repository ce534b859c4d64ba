"""Terminal tools: ``open_terminal``, a program on a pty streamed to the host.

The mechanism (the pty, the two byte streams, flow control) is :mod:`adare_guest.terminal`;
this group checks the call and starts it. The call returns as soon as the program runs;
the terminal then lives in the session's binary streams until its ``TERMINAL_EXIT``.
"""

from __future__ import annotations

from typing import Any

from adare_guest.terminal import DEFAULT_WINDOW, TerminalError, Terminals, user_environment
from adare_guest.tools.base import CallContext, ToolGroup, tool


class TerminalTools(ToolGroup):
    """Interactive terminals (``adare-vm shell``, paused tests)."""

    @tool(timeout=30)
    async def open_terminal(
        self,
        ctx: CallContext,
        *,
        terminal_id: int,
        command: list[str] | None = None,
        run_as_user: str | None = None,
        rows: int = 24,
        cols: int = 80,
        term: str = "xterm",
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> dict[str, Any]:
        """Start ``command`` (default: the user's login shell) on a new pty.

        ``terminal_id`` is the host's id for the stream's messages; ``run_as_user`` runs
        it as that user (the agent must be root); ``window`` bounds the output the host
        may leave unacknowledged.
        """
        if ctx.transfers is None:
            return {"status": "error", "message": "this transport carries no binary messages"}
        try:
            child_env, switch, home, shell = user_environment(run_as_user, term, env)
            argv = list(command) if command else [shell, "-l"]
            terminal = Terminals.of(ctx.transfers).open(
                terminal_id,
                argv,
                rows=rows,
                cols=cols,
                env=child_env,
                cwd=cwd or home,
                switch=switch,
                window=window,
            )
        except TerminalError as exc:
            return {"status": "error", "message": str(exc)}
        return {
            "status": "success",
            "terminal_id": terminal_id,
            "pid": terminal.proc.pid,
            "user": child_env["USER"],
            "command": argv,
        }
