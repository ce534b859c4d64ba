"""Session tools: ``rekey`` replaces the agent's token over an authenticated channel.

A VM started from a saved ready state (a warm start) wakes up with the agent of the
VM that saved it, holding that VM's token. The host connects with the old token once
and installs its own with ``rekey``: the session that called it stays open, every
other WebSocket session that logged in with the old token is closed (1008; its calls
are cancelled), every later connection needs the new token, and
``RUN_DIR/config.json`` is rewritten (owner-only) so an agent restarted by the guest's
init keeps it. So whoever read the old token from a saved state cannot keep a session
open past the rekey.

Such a VM also wakes up with the saved VM's kernel RNG state: every VM started from the
same state would draw the same "random" numbers until the kernel reseeds on its own.
``seed_random`` mixes bytes from the host into the kernel's input pool and makes it
reseed at once (Linux: the ``RNDADDENTROPY`` and ``RNDRESEEDCRNG`` ioctls of
``/dev/urandom``; root only).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

from adare_guest.config import read_config_file
from adare_guest.tools.base import CallContext, ToolGroup, tool

RNDADDENTROPY = 0x40085203
"""``_IOW('R', 0x03, int[2])``: add bytes to the input pool, crediting their entropy."""
RNDRESEEDCRNG = 0x5207
"""``_IO('R', 0x07)``: reseed the kernel's CRNG from the input pool now (Linux 4.17+)."""
MAX_SEED_BYTES = 512

TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
"""What a token may be: 16 to 256 characters that need no quoting in an HTTP header."""


class SessionTools(ToolGroup):
    """Tools about the agent's own session state."""

    @tool(timeout=10)
    async def rekey(self, ctx: CallContext, *, token: str) -> dict[str, Any]:
        """Use ``token`` for every later connection; this session stays authenticated,
        every other session that logged in with the old token is closed (by the server,
        once this call returns)."""
        if not TOKEN_PATTERN.fullmatch(token):
            return {
                "status": "error",
                "message": "token must be 16 to 256 characters of [A-Za-z0-9._~+/=-]",
            }
        config_path = ctx.config.run_dir / "config.json"
        written = await ctx.run_in_thread(_rewrite_token, config_path, token)
        ctx.config.token = token
        return {"status": "success", "config_rewritten": written}

    @tool(timeout=10)
    async def seed_random(self, ctx: CallContext, *, data: str) -> dict[str, Any]:
        """Mix ``data`` (base64, 16 to 512 bytes from the host) into the kernel's random
        pool and reseed its CRNG at once (Linux, as root)."""
        try:
            seed = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return {"status": "error", "message": "data must be base64"}
        if not 16 <= len(seed) <= MAX_SEED_BYTES:
            return {"status": "error", "message": f"data must be 16 to {MAX_SEED_BYTES} bytes"}
        if not sys.platform.startswith("linux"):
            return {"status": "error", "message": f"not supported on {sys.platform}"}
        try:
            await ctx.run_in_thread(_seed_kernel, seed)
        except OSError as exc:
            return {"status": "error", "message": f"cannot seed the kernel RNG: {exc}"}
        return {"status": "success", "bytes": len(seed)}


def _seed_kernel(seed: bytes) -> None:
    import fcntl  # deferred: POSIX only, and the tool returns before this elsewhere

    fd = os.open("/dev/urandom", os.O_WRONLY | os.O_CLOEXEC)
    try:
        # struct rand_pool_info {int entropy_count; int buf_size; __u32 buf[];}
        fcntl.ioctl(fd, RNDADDENTROPY, struct.pack("ii", 8 * len(seed), len(seed)) + seed)
        fcntl.ioctl(fd, RNDRESEEDCRNG)
    finally:
        os.close(fd)


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
