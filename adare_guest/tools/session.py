"""Session tools: ``rekey`` replaces the agent's token over an authenticated channel.

A VM started from a saved ready state (a warm start) wakes up with the agent of the
VM that saved it, holding that VM's token. The host connects with the old token once
and installs its own with ``rekey``: sessions already open stay open, every later
connection needs the new token, and ``RUN_DIR/config.json`` is rewritten (owner-only)
so an agent restarted by the guest's init keeps it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from adare_guest.config import read_config_file
from adare_guest.tools.base import CallContext, ToolGroup, tool

TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
"""What a token may be: 16 to 256 characters that need no quoting in an HTTP header."""


class SessionTools(ToolGroup):
    """Tools about the agent's own session state."""

    @tool(timeout=10)
    async def rekey(self, ctx: CallContext, *, token: str) -> dict[str, Any]:
        """Use ``token`` for every later connection (this session stays authenticated)."""
        if not TOKEN_PATTERN.fullmatch(token):
            return {
                "status": "error",
                "message": "token must be 16 to 256 characters of [A-Za-z0-9._~+/=-]",
            }
        config_path = ctx.config.run_dir / "config.json"
        written = await ctx.run_in_thread(_rewrite_token, config_path, token)
        ctx.config.token = token
        return {"status": "success", "config_rewritten": written}


def _rewrite_token(path: Path, token: str) -> bool:
    """Replace the token in ``path`` atomically, owner-only; False when there is no file."""
    if not path.is_file():
        return False
    data: dict[str, Any] = dict(read_config_file(path))
    data["token"] = token
    fd, temp = tempfile.mkstemp(prefix=".config.", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return True
