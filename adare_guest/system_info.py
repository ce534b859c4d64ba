"""Facts about the guest for ``collect_system_info``: OS, hardware, users, packages.

Read from ``/proc``, ``platform``, ``socket`` and the package manager; a fact that
cannot be read is left empty rather than failing the whole report.
:func:`read_os_release` is Python 3.10's ``platform.freedesktop_os_release`` for the
guest's 3.9.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from adare_guest import __version__

IS_WINDOWS = sys.platform == "win32"


def system_info(remaining: Callable[[], float]) -> dict[str, Any]:
    """OS, hostname, CPU, memory, disks, interfaces, users and OS packages; the package
    listing gets at most ``remaining() - 1`` seconds (1 to 30)."""
    uname = platform.uname()
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "system": uname.system,
        "release": uname.release,
        "version": uname.version,
        "machine": uname.machine,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "cpu_count": os.cpu_count(),
        "agent_version": __version__,
        "boot_time": _boot_time(),
        "os_release": _os_release(),
        "memory": _meminfo(),
        "disks": _disks(),
        "network_interfaces": _interfaces(),
        "users": _users(),
    }
    info["packages"] = _packages(remaining)
    return info


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def _os_release() -> dict[str, str]:
    reader = getattr(platform, "freedesktop_os_release", read_os_release)  # 3.10 and later
    try:
        return dict(reader())
    except OSError:
        return {}


OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")
"""Where os-release(5) is looked for, in order (``/etc`` wins)."""
_OS_RELEASE_LINE = re.compile(
    r"""^(?P<name>[a-zA-Z0-9_]+)=(?P<quote>["']?)(?P<value>.*)(?P=quote)$"""
)
_OS_RELEASE_ESCAPE = re.compile(r"""\\([\\$"'`])""")  # the five characters os-release escapes


def parse_os_release(lines: Iterable[str]) -> dict[str, str]:
    """The fields of os-release(5) ``lines``, parsed like Python 3.10's
    ``platform.freedesktop_os_release`` (defaults for ``NAME``, ``ID``, ``PRETTY_NAME``)."""
    info = {"NAME": "Linux", "ID": "linux", "PRETTY_NAME": "Linux"}
    for line in lines:
        found = _OS_RELEASE_LINE.match(line)
        if found is not None:
            info[found.group("name")] = _OS_RELEASE_ESCAPE.sub(r"\1", found.group("value"))
    return info


def read_os_release(candidates: Sequence[str] = OS_RELEASE_FILES) -> dict[str, str]:
    """``platform.freedesktop_os_release()`` for Pythons before 3.10 (the guest's 3.9).

    :raise OSError: no candidate file can be read.
    """
    error: OSError | None = None
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as handle:
                return parse_os_release(handle)
        except OSError as exc:
            error = exc
    raise OSError(error.errno if error else None, f"Unable to read files {', '.join(candidates)}")


def _meminfo() -> dict[str, int]:
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if key in ("MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree") and parts:
                fields[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        pass
    return fields


def _disks() -> list[dict[str, Any]]:
    roots = ["C:\\"] if IS_WINDOWS else ["/"]
    disks = []
    for root in roots:
        try:
            usage = shutil.disk_usage(root)
        except OSError:
            continue
        disks.append({"path": root, "total": usage.total, "used": usage.used, "free": usage.free})
    return disks


def _interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return []


def _users() -> list[str]:
    if IS_WINDOWS:
        return []
    # Deferred: pwd does not exist on Windows, where this module must still import.
    import pwd

    return sorted(e.pw_name for e in pwd.getpwall() if e.pw_uid == 0 or e.pw_uid >= 1000)


def _packages(remaining: Callable[[], float]) -> dict[str, Any]:
    """Installed OS packages (dpkg or rpm), bounded in time."""
    for argv, manager in (
        (["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], "dpkg"),
        (["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], "rpm"),
    ):
        if shutil.which(argv[0]) is None:
            continue
        try:
            out = subprocess.run(
                argv,
                capture_output=True,
                timeout=max(1.0, min(30.0, remaining() - 1)),
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {"manager": manager, "error": "listing packages failed or timed out"}
        lines = out.decode("utf-8", errors="replace").splitlines()
        items = dict(line.split("\t", 1) for line in lines if "\t" in line)
        return {"manager": manager, "count": len(items), "installed": items}
    return {"manager": None, "count": 0, "installed": {}}
