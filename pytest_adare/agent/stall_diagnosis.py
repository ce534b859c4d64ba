"""Why a connected agent went silent during a call: its health report, then a pure verdict.

The agent's serial link answers a ping from its device thread, without the event loop
(:mod:`adare_guest.activity`): how late the loop is for its heartbeat, which calls run
since when, how busy its worker threads are. :func:`stall_cause` turns that report
into one sentence::

    stall_cause({"loop_late": 0.0, "calls": "", ...}, "run_test", 61.0)
    # "the agent's event loop runs and no 'run_test' call is running: the call or its
    #  answer was lost between host and agent"
"""

from __future__ import annotations

from typing import Any

from adare_guest.activity import LOOP_BLOCKED
from pytest_adare.agent.diagnosis import decode_address

ESTABLISHED = "01"
ANSWERS_PINGS = 30.0
"""Below this many seconds of silence on the connection the agent answered the host's
pings (sent after 10 s of silence), so a running call is merely slow."""
LOOP_LATE = LOOP_BLOCKED
"""Seconds late for its 1 s heartbeat past which the agent's event loop counts as blocked."""


def describe_health(health: dict[str, Any]) -> str:
    """The report's activity fields in one line (what the agent was doing)."""
    late = health.get("loop_late")
    loop = "unknown" if late is None else f"{late:g} s late" if late else "on time"
    parts = [
        f"loop {loop}",
        f"calls: {health.get('calls') or 'none'}",
        f"workers: {health.get('workers', '?')}",
        f"sessions: {health.get('sessions', '?')}",
    ]
    if health.get("last_error"):
        parts.append(f"last error: {health['last_error']}")
    return "; ".join(parts)


def agent_connections(proc_net_tcp: str, port: int) -> list[str]:
    """The agent's established TCP connections on ``port`` and what waits in their kernel
    queues, from ``/proc/net/tcp{,6}`` text: an answer the agent wrote but the network
    did not carry off stays in the send queue; a call the agent never read, in the
    receive queue."""
    found: list[str] = []
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[3] != ESTABLISHED or ":" not in fields[4]:
            continue
        local_port = fields[1].rpartition(":")[2]
        remote, _, remote_port = fields[2].rpartition(":")
        try:
            if int(local_port, 16) != port:
                continue
            sent, received = (int(part, 16) for part in fields[4].split(":"))
            peer = f"{decode_address(remote)}:{int(remote_port, 16)}"
        except ValueError:
            continue
        found.append(f"from {peer}: {sent} B unsent, {received} B unread")
    return found


def stall_cause(health: dict[str, Any] | None, tool: str, silent: float) -> str:
    """Why the agent sent nothing for ``silent`` seconds while ``tool`` was awaited (pure).

    ``health`` is the serial link's report, None when that did not answer either.
    """
    if health is None:
        return (
            "the agent's serial link did not answer either: the agent process is stopped or "
            "gone, or the guest is hung"
        )
    late = health.get("loop_late")
    if isinstance(late, (int, float)) and late > LOOP_LATE:
        where = f", at {health['loop_at']}" if health.get("loop_at") else ""
        return (
            f"the agent's event loop is blocked ({late:.0f} s late for its heartbeat{where}): "
            "code on the loop waits for something (a lock, a read) instead of a worker thread"
        )
    calls = str(health.get("calls") or "")
    running = any(entry.split(" ")[0] == tool for entry in calls.split(", ") if entry)
    if not running:
        return (
            f"the agent's event loop runs and no {tool!r} call is running: the call or its "
            "answer was lost between host and agent"
        )
    if silent < ANSWERS_PINGS:
        # The connection is not silent (pings are answered): the call is only slow.
        return (
            f"the agent answers and its {tool!r} call is still running: the work itself "
            "takes longer than the call's timeout (give the call a longer one)"
        )
    return (
        f"the agent's event loop runs and {tool!r} is running, yet {silent:.0f} s of pings "
        "got no answer on this connection: the session's message reader is held up"
    )
