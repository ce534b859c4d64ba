"""The stock ``linux`` collection: processes, users, services, listening ports, logs.

Read from ``/proc``, ``pwd`` and ``systemctl`` (stdlib only, no psutil). On
another OS every check is an ERROR saying so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path

from adare_guest.stock.support import must_exist
from adare_guest.testfunctions import TestContext, TestError, testfunction

_LISTEN_STATES = {"tcp": "0A", "udp": "07"}  # /proc/net: TCP_LISTEN; UDP sockets sit in CLOSE


def _linux_only(ctx: TestContext) -> None:
    ctx.error_if(
        not sys.platform.startswith("linux"), f"this check runs on Linux only, not {sys.platform}"
    )


def _command_lines() -> dict[int, str]:
    """pid → command line (arguments joined by spaces) of every process we may read."""
    lines = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            if not raw:  # kernel thread: use its name
                raw = (entry / "comm").read_bytes().strip()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        lines[int(entry.name)] = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return lines


@testfunction(
    description="at least min_instances processes whose command line matches process_name"
)
def process_running(ctx: TestContext, process_name: str, min_instances: int = 1) -> str:
    _linux_only(ctx)
    try:
        pattern = re.compile(process_name)
    except re.error as exc:
        raise TestError(f"bad pattern {process_name!r}: {exc}") from None
    pids = sorted(pid for pid, line in _command_lines().items() if pattern.search(line))
    ctx.fail_if(not pids, f"process {process_name} is not running")
    ctx.fail_if(
        len(pids) < min_instances,
        f"process {process_name} has {len(pids)} instances, expected at least {min_instances}",
    )
    shown = ", ".join(map(str, pids[:20]))
    return f"process {process_name} running with {len(pids)} instances (PIDs: {shown})"


@testfunction(description="the user exists (optionally with this uid and home_dir)")
def user_exists(
    ctx: TestContext, username: str, uid: int | None = None, home_dir: str | None = None
) -> str:
    _linux_only(ctx)
    # Deferred: pwd does not exist on Windows, where the collection must still load.
    import pwd

    try:
        entry = pwd.getpwnam(username)
    except KeyError:
        ctx.fail(f"user {username} does not exist")
    ctx.fail_if(
        uid is not None and entry.pw_uid != uid,
        f"user {username} has UID {entry.pw_uid}, expected {uid}",
    )
    ctx.fail_if(
        home_dir is not None and entry.pw_dir != home_dir,
        f"user {username} has home {entry.pw_dir}, expected {home_dir}",
    )
    return f"user {username} exists (UID: {entry.pw_uid}, Home: {entry.pw_dir})"


@testfunction(description="systemctl is-active SERVICE prints expected_status")
def system_service_status(ctx: TestContext, service_name: str, expected_status: str) -> str:
    _linux_only(ctx)
    systemctl = shutil.which("systemctl")
    ctx.error_if(systemctl is None, "systemctl not found: this guest does not run systemd")
    assert systemctl is not None
    try:
        done = subprocess.run(
            [systemctl, "is-active", service_name], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TestError(f"cannot run systemctl: {exc}") from None
    actual = done.stdout.strip() or done.stderr.strip()
    ctx.fail_if(
        actual != expected_status,
        f"service {service_name} is {actual!r}, expected {expected_status!r}",
    )
    return f"service {service_name} is {actual}"


def _listeners(protocol: str) -> list[tuple[str, int]]:
    """(address, port) of every listening socket of ``protocol`` (IPv4 and IPv6)."""
    found = []
    for table in (f"/proc/net/{protocol}", f"/proc/net/{protocol}6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _LISTEN_STATES[protocol]:
                address, port = fields[1].rsplit(":", 1)
                found.append((_address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    """/proc/net hex address (host byte order words) → readable IP."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    # Deferred: only IPv6 addresses need it.
    import ipaddress

    return str(ipaddress.IPv6Address(words))


@testfunction(description="something listens on port (tcp or udp), optionally on address")
def listening_port(
    ctx: TestContext, port: int, protocol: str = "tcp", address: str | None = None
) -> str:
    _linux_only(ctx)
    ctx.error_if(protocol not in _LISTEN_STATES, f"protocol must be tcp or udp, got {protocol!r}")
    ctx.error_if(not 0 < port < 65536, f"port must be 1..65535, got {port}")
    hits = [(a, p) for a, p in _listeners(protocol) if p == port]
    ctx.fail_if(not hits, f"nothing listens on {protocol} port {port}")
    if address is not None:
        ctx.fail_if(
            all(a != address for a, _ in hits),
            f"{protocol} port {port} is bound to {sorted({a for a, _ in hits})}, not {address}",
        )
    return f"{protocol} port {port} is listening on {sorted({a for a, _ in hits})}"


@testfunction(description="one of the last max_lines lines of log_file matches pattern (re.search)")
def log_entry_exists(ctx: TestContext, log_file: str, pattern: str, max_lines: int = 1000) -> str:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise TestError(f"bad pattern {pattern!r}: {exc}") from None
    must_exist(ctx, log_file, "log file")
    try:
        with open(log_file, encoding="utf-8", errors="replace") as handle:
            tail = deque(handle, maxlen=max_lines)
    except OSError as exc:
        raise TestError(f"cannot read {log_file}: {exc}") from None
    hits = [line.rstrip("\n") for line in tail if regex.search(line)]
    ctx.fail_if(not hits, f"no line of the last {len(tail)} in {log_file} matches /{pattern}/")
    return f"found {len(hits)} log entries matching /{pattern}/ in {log_file}; last: {hits[-1]!r}"
