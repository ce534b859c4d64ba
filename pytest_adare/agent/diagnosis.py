"""Why the agent cannot be reached: facts from the guest, then a pure decision.

When every connect attempt failed, :func:`collect_facts` asks the guest over the two
side channels that do not need the agent's WebSocket: the agent's serial link
(its health report) and QGA (one ``python3`` run that reads ``/proc``, the firewall
state and the agent's log). :func:`decide` turns those :class:`AgentFacts` into one
sentence naming the cause; it is pure, so it is tested on recorded facts::

    facts = await collect_facts(qga=qga, serial=serial_client, port=DEFAULT_PORT, ...)
    raise AgentUnreachable(decide(facts), facts.as_details())
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any, Protocol

from adare_guest.config import DEFAULT_PORT
from pytest_adare.agent.websocket_client import describe_error
from pytest_adare.errors import AgentUnreachable

LOOPBACK = ("127.0.0.1", "::1")
LISTEN_STATE = "0A"


@dataclass
class AgentFacts:
    """Everything known about the unreachable agent (JSON-able, recorded in test data)."""

    port: int = DEFAULT_PORT
    connect_errors: list[str] = field(default_factory=list)
    serial_health: dict[str, Any] | None = None
    serial_error: str | None = None
    qga_error: str | None = None
    """None when QGA answered the facts script."""
    agent_pids: list[int] | None = None
    """Agent processes running for 2 s or more; None when unknown (QGA did not answer)."""
    proc_net_tcp: str = ""
    """``/proc/net/tcp`` and ``/proc/net/tcp6`` of the guest, concatenated."""
    firewalld_state: str | None = None
    """``firewall-cmd --state`` output; None where firewall-cmd does not exist."""
    firewalld_zone: str | None = None
    firewalld_ports: str | None = None
    nft_ruleset: str | None = None
    """``nft list ruleset``; None where nft does not exist."""
    iptables_rules: str | None = None
    """``iptables-save``; None where it does not exist."""
    ipv4_addresses: str | None = None
    """``ip -4 -o addr``; None where ``ip`` does not exist or QGA did not answer."""
    links: str | None = None
    """``ip -o link``: the guest's interfaces and their state."""
    log_path: str = ""
    log_tail: list[str] = field(default_factory=list)

    def as_details(self) -> dict[str, Any]:
        """The facts as the ``details`` dict of :class:`AgentUnreachable`."""
        return asdict(self)


def decode_address(hex_address: str) -> str:
    """``0100007F`` → ``127.0.0.1``; 32 hex digits → an IPv6 text (``::`` and ``::1`` short)."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ".".join(str(b) for b in reversed(raw))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if words == bytes(16):
        return "::"
    if words == bytes(15) + b"\x01":
        return "::1"
    if words[:12] == bytes(10) + b"\xff\xff":
        return ".".join(str(b) for b in words[12:])
    return ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))


def listening_addresses(proc_net_tcp: str, port: int) -> list[str]:
    """Local addresses in LISTEN state on ``port`` in ``/proc/net/tcp{,6}`` text."""
    found: list[str] = []
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1] or fields[3] != LISTEN_STATE:
            continue
        address, _, hex_port = fields[1].rpartition(":")
        try:
            if int(hex_port, 16) == port:
                found.append(decode_address(address))
        except ValueError:
            continue
    return found


def firewall_blocks(facts: AgentFacts) -> list[str]:
    """Descriptions of firewall state that drops inbound connections to the agent's port."""
    port = str(facts.port)
    blocks: list[str] = []
    state = (facts.firewalld_state or "").strip()
    if state == "running" and f"{port}/tcp" not in (facts.firewalld_ports or ""):
        zone = (facts.firewalld_zone or "").strip() or "(default)"
        blocks.append(f"firewalld is active in zone {zone} without {port}/tcp open")
    blocks.extend(_nft_blocks(facts.nft_ruleset or "", port))
    blocks.extend(_iptables_blocks(facts.iptables_rules or "", port))
    return blocks


def _nft_blocks(ruleset: str, port: str) -> list[str]:
    blocks: list[str] = []
    table = chain = ""
    for raw in ruleset.splitlines():
        line = raw.strip()
        if m := re.match(r"table (\S+ \S+)", line):
            table = m.group(1)
        elif m := re.match(r"chain (\S+)", line):
            chain = m.group(1)
        elif re.search(rf"dport (\{{[^}}]*\b{port}\b[^}}]*\}}|{port})\b", line) and re.search(
            r"\b(drop|reject)\b", line
        ):
            blocks.append(f"nftables rule in table {table} chain {chain} drops it: `{line}`")
        elif "hook input" in line and "policy drop" in line and port not in ruleset:
            blocks.append(f"nftables chain {table} {chain} has input policy drop")
    return blocks


def _iptables_blocks(rules: str, port: str) -> list[str]:
    blocks: list[str] = []
    for raw in rules.splitlines():
        line = raw.strip()
        if (
            line.startswith("-A INPUT")
            and re.search(rf"--dport {port}\b", line)
            and re.search(r"-j (DROP|REJECT)\b", line)
        ):
            blocks.append(f"iptables rule drops it: `{line}`")
        elif line.startswith(":INPUT DROP") and port not in rules:
            blocks.append("iptables INPUT policy is DROP")
    return blocks


def guest_addresses(facts: AgentFacts) -> list[str]:
    """``enp0s2 10.0.2.15/24`` for every IPv4 address outside loopback."""
    found = []
    for line in (facts.ipv4_addresses or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and not fields[3].startswith("127."):
            found.append(f"{fields[1]} {fields[3]}")
    return found


def _links(facts: AgentFacts) -> str:
    """``enp0s2 DOWN, lo UNKNOWN`` from ``ip -o link`` text."""
    links = []
    for line in (facts.links or "").splitlines():
        name = re.match(r"\d+:\s+([^:@\s]+)", line)
        state = re.search(r"\bstate (\S+)", line)
        if name and name.group(1) != "lo":
            links.append(f"{name.group(1)} {state.group(1) if state else '?'}")
    return ", ".join(links) or "none besides lo"


def _last_line(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return None


def decide(facts: AgentFacts) -> str:
    """The cause of the unreachable agent, in one sentence (pure)."""
    port = facts.port
    health = facts.serial_health
    if facts.qga_error is not None and health is None:
        return (
            "the guest answers neither QGA nor the agent's serial link "
            f"({facts.qga_error}); it is not up, hung, or runs neither agent"
        )
    running = bool(facts.agent_pids) if facts.agent_pids is not None else health is not None
    last_log = _last_line(facts.log_tail)
    if not running:
        if last_log:
            return f"the agent is not running in the guest (it exited); last log line: {last_log}"
        where = f" at {facts.log_path}" if facts.log_path else ""
        return f"the agent is not running in the guest and left no log{where}"
    if facts.qga_error is not None and health is not None:
        listen = str(health.get("listen", "?"))
        if not health.get("listening"):
            return f"the agent runs but does not listen on {listen}: {health.get('last_error')}"
        if listen.split(":")[0] in LOOPBACK:
            return (
                f"the agent listens only on {listen} inside the guest, which the forwarded "
                "connection cannot reach (it must listen on 0.0.0.0)"
            )
        return (
            f"the agent listens on {listen} inside the guest but the host cannot connect "
            f"(QGA unavailable to check the firewall: {facts.qga_error})"
        )
    addresses = listening_addresses(facts.proc_net_tcp, port)
    if not addresses:
        reason = (health or {}).get("last_error") or last_log or "no error logged"
        return (
            f"the agent runs but nothing listens on port {port} in the guest; last error: {reason}"
        )
    if all(a in LOOPBACK for a in addresses):
        return (
            f"the agent listens only on {addresses[0]}:{port} inside the guest, which the "
            "forwarded connection cannot reach (it must listen on 0.0.0.0)"
        )
    public = next(a for a in addresses if a not in LOOPBACK)
    blocks = firewall_blocks(facts)
    if blocks:
        return (
            f"the agent listens on {public}:{port} inside the guest but the forwarded "
            f"connection is dropped: {blocks[0]}"
        )
    last_error = facts.connect_errors[-1] if facts.connect_errors else "no error recorded"
    if facts.ipv4_addresses is not None and not guest_addresses(facts):
        return (
            f"the agent listens on {public}:{port} but the guest has no IPv4 address outside "
            f"loopback (links: {_links(facts)}), so QEMU's user network cannot reach it: its "
            "network configuration does not bring up this NIC (it sits in PCI slot 2, "
            "enp0s2); --adare-transport=serial needs no network"
        )
    if facts.ipv4_addresses is not None:
        last_error += (
            f" (guest addresses: {'; '.join(guest_addresses(facts))}; "
            "--adare-transport=serial needs no network)"
        )
    return (
        f"the agent listens on {public}:{port} inside the guest and no firewall rule blocks "
        f"it, yet the host could not connect: {last_error}"
    )


# -- collecting ------------------------------------------------------------------------

FACTS_SCRIPT = resources.files("adare_guest").joinpath("guest_facts.py").read_text("utf-8")
"""The guest-side facts script (:mod:`adare_guest.guest_facts`), run as ``python3 -c
FACTS_SCRIPT PORT LOG...``; prints the facts as JSON."""


class FactsRunner(Protocol):
    """Runs a program in the guest and returns (exit code, stdout, stderr) — QGA exec."""

    async def __call__(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]: ...


async def guest_facts(
    run: FactsRunner, facts: AgentFacts, logs: Sequence[str], python: str = "python3"
) -> None:
    """Fill ``facts`` from the facts script run through QGA; on failure set ``qga_error``."""
    try:
        code, out, err = await run([python, "-c", FACTS_SCRIPT, str(facts.port), *logs], 60)
        if code != 0:
            raise RuntimeError(f"facts script exited {code}: {err.strip()[-300:]}")
        found = json.loads(out)
    except Exception as exc:
        facts.qga_error = describe_error(exc)
        return
    facts.agent_pids = [int(p) for p in found["agent_pids"]]
    facts.proc_net_tcp = found["proc_net_tcp"]
    for key in (
        "firewalld_state",
        "firewalld_zone",
        "firewalld_ports",
        "nft_ruleset",
        "iptables_rules",
        "ipv4_addresses",
        "links",
    ):
        setattr(facts, key, found.get(key))
    facts.log_path = str(found["log_path"]) or facts.log_path
    facts.log_tail = [str(line) for line in found["log_tail"]]


async def serial_health(ping: Callable[[], Awaitable[dict[str, Any]]], facts: AgentFacts) -> None:
    """Fill ``facts.serial_health`` from the agent's serial ping; on failure ``serial_error``."""
    try:
        facts.serial_health = await ping()
    except Exception as exc:
        facts.serial_error = describe_error(exc)


def unreachable(facts: AgentFacts) -> AgentUnreachable:
    """The error to raise: the decided cause, with every fact attached as ``details``."""
    return AgentUnreachable(decide(facts), facts.as_details())
