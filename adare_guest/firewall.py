"""Open one TCP port in a Linux guest's firewalls, in memory only: nothing is persisted.

The host runs this file's source in the guest before the agent starts (over QGA:
``python3 -c <source> PORT``; from cloud-init: ``python3 <file> PORT``), so it is one
self-contained, standard-library-only script (Python 3.9 and later). It prints one
JSON object: ``{"port": PORT, "actions": [...]}``, one text per firewall it acted on,
and exits 0 even when a step failed (the failure is one of the actions: the agent may
still be reachable, and the host's diagnosis names a firewall that blocks it).

What it does, per firewall found:

* **firewalld** (running): ``firewall-cmd --add-port=PORT/tcp``, the runtime rule
  (not ``--permanent``). firewalld's own nftables tables are left to it.
* **nftables**: one ``tcp dport PORT accept`` inserted at the top of every base chain of
  type ``filter`` on the ``input`` hook (each base chain on a hook decides on its own:
  an accept in one does not spare the packet a drop in another). Tables owned by
  firewalld or by ``iptables-nft`` are skipped: those tools manage them.
* **iptables / ip6tables** (``nf_tables`` or ``legacy`` backend): ``-I INPUT 1 -p tcp
  --dport PORT -j ACCEPT`` where the ``INPUT`` chain has a DROP policy or any rule.
  This also covers **ufw**, which keeps its rules in chains jumped to from ``INPUT``:
  ufw itself has no rule that lives only in memory (``ufw allow`` writes its files).

Nothing is written to disk; a reboot (or a firewall reload) forgets the rules.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

TIMEOUT = 20.0
"""Seconds one firewall command may take."""
FIREWALLD_TABLES = {("inet", "firewalld"), ("ip", "firewalld"), ("ip6", "firewalld")}
IPTABLES_NFT_TABLES = {("ip", "filter"), ("ip6", "filter")}
"""The nftables tables ``iptables-nft`` / ``ip6tables-nft`` keep their ``INPUT`` in."""


def run(argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout + stderr); 127 with the reason when it cannot run."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout.decode("utf-8", "replace").strip()


def input_chains(listing: str) -> list[tuple[str, str, str]]:
    """``(family, table, chain)`` of each filter base chain on the input hook, from the
    text of ``nft list chains`` (or ``nft list ruleset``)."""
    found: list[tuple[str, str, str]] = []
    family = table = chain = ""
    for raw in listing.splitlines():
        line = raw.strip()
        table_match = re.match(r"table (\S+) (\S+) \{", line)
        chain_match = re.match(r"chain (\S+) \{", line)
        if table_match:
            family, table, chain = table_match.group(1), table_match.group(2), ""
        elif chain_match:
            chain = chain_match.group(1)
        elif chain and re.match(r"type filter hook input\b", line):
            found.append((family, table, chain))
    return found


def iptables_needs_rule(listing: str) -> bool:
    """Whether ``iptables -S INPUT`` text shows a DROP policy or any rule at all."""
    lines = [line.strip() for line in listing.splitlines() if line.strip()]
    return any(line == "-P INPUT DROP" or line.startswith("-A INPUT") for line in lines)


def open_firewalld(port: int) -> list[str]:
    """The runtime port in firewalld when it runs."""
    if not shutil.which("firewall-cmd") or run(["firewall-cmd", "--state"])[0] != 0:
        return []
    code, text = run(["firewall-cmd", f"--add-port={port}/tcp"])
    return [f"firewalld: {port}/tcp added (runtime)" if code == 0 else
            f"firewalld: --add-port failed ({code}): {text[:200]}"]  # fmt: skip


def iptables_backend(tool: str) -> str | None:
    """``nf_tables`` or ``legacy`` for an installed ``iptables``/``ip6tables``, else None."""
    if not shutil.which(tool):
        return None
    code, text = run([tool, "-V"])
    if code != 0:
        return None
    return "nf_tables" if "nf_tables" in text else "legacy"


def open_nftables(port: int, skip: set[tuple[str, str]]) -> list[str]:
    """An accept rule at the top of every input filter base chain not in ``skip``."""
    if not shutil.which("nft"):
        return []
    code, listing = run(["nft", "list", "chains"])
    if code != 0:
        return [f"nftables: cannot list chains ({code}): {listing[:200]}"]
    actions = []
    for family, table, chain in input_chains(listing):
        if (family, table) in skip:
            continue
        code, text = run(["nft", "insert", "rule", family, table, chain,
                          "tcp", "dport", str(port), "accept"])  # fmt: skip
        where = f"{family} {table} {chain}"
        actions.append(f"nftables: {where} accepts {port}/tcp" if code == 0 else
                       f"nftables: insert into {where} failed ({code}): {text[:200]}")  # fmt: skip
    return actions


def open_iptables(tool: str, port: int) -> list[str]:
    """An accept rule first in ``INPUT`` where that chain drops or filters anything."""
    code, listing = run([tool, "-S", "INPUT"])
    if code != 0 or not iptables_needs_rule(listing):
        return []
    code, text = run([tool, "-I", "INPUT", "1", "-p", "tcp", "--dport", str(port), "-j", "ACCEPT"])
    return [f"{tool}: INPUT accepts {port}/tcp" if code == 0 else
            f"{tool}: -I INPUT failed ({code}): {text[:200]}"]  # fmt: skip


def open_port(port: int) -> list[str]:
    """Open ``port`` in every firewall found; one text per action."""
    actions = open_firewalld(port)
    skip = set(FIREWALLD_TABLES)
    iptables = {tool: iptables_backend(tool) for tool in ("iptables", "ip6tables")}
    if "nf_tables" in iptables.values():
        skip |= IPTABLES_NFT_TABLES
    actions += open_nftables(port, skip)
    for tool, backend in iptables.items():
        if backend is not None:
            actions += open_iptables(tool, port)
    return actions


def main(argv: list[str]) -> int:
    """``PORT`` → the JSON report on stdout; 2 for a bad argument."""
    if len(argv) != 1 or not argv[0].isdigit() or not 0 < int(argv[0]) < 65536:
        print("usage: firewall.py PORT (1-65535)", file=sys.stderr)
        return 2
    port = int(argv[0])
    print(json.dumps({"port": port, "actions": open_port(port)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
