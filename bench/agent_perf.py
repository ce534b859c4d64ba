"""The agent's own costs in one guest, each beside its floor measured in the same guest.

    python bench/agent_perf.py [--image debian] [--n 40]

Figures (one JSON object on stdout):

* ``shell``: ``execute_shell("true")`` p50 through the agent (``posix_spawn`` + pidfd
  path, and the asyncio-subprocess path it replaced, forced with
  ``ADARE_NO_FAST_SPAWN``), the ``get_timestamp`` round trip (the transport's share),
  and the floor: ``posix_spawn("/bin/sh -c true")`` + ``waitpid`` timed in a loop by a
  ``python3 -S`` inside the guest.
* ``snapshot``: ``fs_snapshot("/usr")`` (pages of records) and the JSON format of the
  same tree, both host wall time to a parsed ``FsSnapshot``, beside ``find /usr
  -printf`` of the same fields timed inside the guest.
* ``agent_import``: ``python3 -S -X importtime`` of the agent's modules from its
  bundle, as the guest's init starts it (the sum of the self times, median of three,
  and the largest self times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from pytest_adare import launch
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.guest import Guest

FLOOR = r"""
import os, time
argv = ["/bin/sh", "-c", "true"]
samples = []
for _ in range({n}):
    t = time.perf_counter()
    os.waitpid(os.posix_spawn(argv[0], argv, os.environ), 0)
    samples.append(time.perf_counter() - t)
samples.sort()
print(samples[len(samples) // 2] * 1000)
"""
FIND_FIELDS = r"%y %s %m %U %G %i %T@ %A@ %C@ - %p\0%l\0"
AGENT_MODULES = "adare_guest.cli, adare_guest.server, adare_guest.serial.transport"


def p50_ms(fn: Any, n: int) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return round(statistics.median(samples) * 1000, 2)


def guest_python(guest: Guest, source: str) -> str:
    guest.shell("cat > /tmp/bench.py <<'ADARE_EOF'\n" + source + "\nADARE_EOF").check()
    return guest.shell("python3 -S /tmp/bench.py", timeout=600).check().stdout.strip()


def shell(guest: Guest, n: int) -> dict[str, Any]:
    old_env = {"ADARE_NO_FAST_SPAWN": "1"}
    fast: list[float] = []
    old: list[float] = []
    for _ in range(n // 5):  # alternate, so a load swing on the host hits both alike
        fast.append(p50_ms(lambda: guest.shell("true"), 5))
        old.append(p50_ms(lambda: guest.shell("true", env=old_env), 5))
    return {
        "agent_p50_ms": round(statistics.median(fast), 2),
        "agent_asyncio_subprocess_p50_ms": round(statistics.median(old), 2),
        "get_timestamp_p50_ms": p50_ms(lambda: guest.call("get_timestamp"), n),
        "floor_posix_spawn_sh_c_true_p50_ms": round(
            float(guest_python(guest, FLOOR.format(n=n))), 2
        ),
    }


def snapshot(guest: Guest) -> dict[str, Any]:
    guest.call("get_filesystem_snapshot", root_path="/usr")  # warm the guest's caches once
    find = guest.shell(
        f"a=$(date +%s%N); find /usr -mindepth 1 -xdev -printf '{FIND_FIELDS}' > /dev/null;"
        " b=$(date +%s%N); echo $(( (b - a) / 1000 ))"
    ).check()
    t = time.perf_counter()
    lines = guest.fs_snapshot("/usr")
    lines_s = time.perf_counter() - t
    t = time.perf_counter()
    old = FsSnapshot.from_result(
        guest.call("get_filesystem_snapshot", root_path="/usr"), root="/usr"
    )
    json_s = time.perf_counter() - t
    return {
        "entries": len(lines),
        "same_entries": lines.entries == old.entries,
        "lines_s": round(lines_s, 3),
        "json_s": round(json_s, 3),
        "find_in_guest_s": round(int(find.stdout) / 1e6, 3),
    }


def agent_import(guest: Guest) -> dict[str, Any]:
    code = f"import sys; sys.path.insert(0, '/adare/agent/bundle.pyz'); import {AGENT_MODULES}"
    runs = []
    for _ in range(3):
        text = guest.shell(f'python3 -S -X importtime -c "{code}" 2>&1', timeout=300).stdout
        rows = []
        for line in text.splitlines():  # "import time: SELF_US | CUMULATIVE_US | NAME"
            parts = line.removeprefix("import time:").split("|")
            if line.startswith("import time:") and parts[0].strip().isdigit():
                rows.append((int(parts[0]), parts[2].strip()))
        total = sum(us for us, _name in rows)
        runs.append((total, rows))
    total, rows = sorted(runs)[1]
    top = sorted(rows, reverse=True)[:8]
    return {
        "total_s": round(total / 1e6, 3),
        "largest_self_ms": {name: round(us / 1000, 1) for us, name in top},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default="debian")
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    with launch(args.image, progress=None) as vm:
        guest = vm.guest
        figures = {
            "shell": shell(guest, args.n),
            "snapshot": snapshot(guest),
            "agent_import": agent_import(guest),
        }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    sys.exit(main())
