"""The real agent as its own process on this host, driven through the guest facade:
``python -m adare_guest`` with a config file, as images start it, and a ``Guest``
connected to it over WebSocket. Tests that need an agent but no VM use it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.loop_thread import shared_loop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _make_guest(client: AgentClient) -> AsyncGuest:
    return AsyncGuest(client)  # made on the shared loop, whose thread it runs on


@contextmanager
def local_agent_guest(
    run_dir: Path,
    token: str,
    env: Mapping[str, str] | None = None,
    ignoring: tuple[int, ...] = (),
) -> Iterator[Guest]:
    """The agent started in ``run_dir`` (its config and log there) with ``token``, and a
    ``Guest`` on it; the agent is stopped afterwards. ``ignoring``: signals the agent
    inherits as ignored (as from ``nohup`` or a script's ``&``)."""
    port = free_port()
    config = run_dir / "config.json"
    config.write_text(json.dumps({"host": "127.0.0.1", "port": port, "token": token}))
    config.chmod(0o600)
    argv = [sys.executable, "-m", "adare_guest", str(run_dir), "--log-file", str(run_dir / "a.log")]
    if ignoring:
        ignore = "".join(f"signal.signal({sig}, signal.SIG_IGN); " for sig in ignoring)
        argv = [sys.executable, "-c", f"import os, signal, sys; {ignore}os.execv(sys.argv[1], "
                "sys.argv[1:])", *argv]  # fmt: skip
    agent = subprocess.Popen(
        argv,
        env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    loop = shared_loop()
    try:
        client = loop.run(AgentClient.connect("127.0.0.1", port, token, attempts=40, backoff=0.1))
        yield Guest(loop.run(_make_guest(client)))
        loop.run(client.close())
    finally:
        agent.terminate()
        agent.wait(10)
