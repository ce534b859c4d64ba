"""What the guest can say about an agent the host cannot reach, as one JSON object.

The host runs this file's source in the guest over QGA (``python3 -c <source> PORT
LOG...``) when every connect attempt failed, so it is one self-contained,
standard-library-only script (Python 3.9 and later) that needs nothing of the agent.
It prints the facts that ``pytest_adare.agent.diagnosis`` turns into one sentence:
the agent processes running for 2 s or more, ``/proc/net/tcp{,6}``, the firewall
state (firewalld, nftables, iptables), the guest's addresses and links, and the tail
of the most recently written of the given logs (the agent's log file, or its
captured stdout/stderr when it died before logging started).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

AGENT_NEEDLES = ("adare" + "_guest", "bundle" + ".pyz")
"""Command-line parts of a running agent (split, so this script's own command line,
which holds its source, never matches)."""
SETTLED_SECONDS = 2.0
"""A process younger than this is a restart in progress (a crash loop), not a running agent."""
COMMAND_TIMEOUT = 15.0
"""Seconds one firewall or ``ip`` command may take."""
TAIL_LINES = 20


def agent_pids() -> list[int]:
    """Pids of the Python processes running the agent for at least :data:`SETTLED_SECONDS`."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat") as handle:
                started = int(handle.read().rsplit(")", 1)[1].split()[19]) / hz
        except (OSError, ValueError, IndexError):
            continue
        running = uptime - started >= SETTLED_SECONDS
        if "python" in cmd and any(n in cmd for n in AGENT_NEEDLES) and running:
            pids.append(int(entry))
    return pids


def read(path: str) -> str:
    """The text of ``path``; empty when it cannot be read."""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def run(*cmd: str) -> str | None:
    """``cmd``'s stdout and stderr; None where the program does not exist."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        return (done.stdout + done.stderr).strip()
    except Exception as exc:
        return f"error: {exc}"


def newest_log(logs: list[str]) -> tuple[str, list[str]]:
    """(path, last lines) of the most recently written of ``logs`` that holds text."""
    # A crash loop truncates its output file at each restart: wait for it to refill.
    path, lines, present = "", [], []
    for _ in range(6):
        present = [p for p in logs if os.path.isfile(p)]
        if present:
            path = max(present, key=os.path.getmtime)
            lines = read(path).splitlines()[-TAIL_LINES:]
            if lines:
                break
        time.sleep(0.5)
    else:
        for other in sorted(present, key=os.path.getmtime, reverse=True):
            if read(other).strip():
                return other, read(other).splitlines()[-TAIL_LINES:]
    return path, lines


def facts(logs: list[str]) -> dict[str, Any]:
    """Every fact, by the key names of ``AgentFacts``."""
    log_path, log_tail = newest_log(logs)
    firewalld = shutil.which("firewall-cmd") is not None
    return {
        "agent_pids": agent_pids(),
        "proc_net_tcp": read("/proc/net/tcp") + read("/proc/net/tcp6"),
        "firewalld_state": run("firewall-cmd", "--state") if firewalld else None,
        "firewalld_zone": run("firewall-cmd", "--get-default-zone") if firewalld else None,
        "firewalld_ports": run("firewall-cmd", "--list-ports") if firewalld else None,
        "nft_ruleset": run("nft", "list", "ruleset"),
        "iptables_rules": run("iptables-save"),
        "ipv4_addresses": run("ip", "-4", "-o", "addr"),
        "links": run("ip", "-o", "link"),
        "log_path": log_path,
        "log_tail": log_tail,
    }


def main(argv: list[str]) -> int:
    """``PORT LOG...`` → the facts as JSON on stdout; 2 for a bad argument."""
    if not argv or not argv[0].isdigit():
        print("usage: guest_facts.py PORT [LOG...]", file=sys.stderr)
        return 2
    print(json.dumps(facts(argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
