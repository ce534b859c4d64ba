"""Run every benchmark script against one image; write bench/results.json and docs/performance.md.

    python bench/run_all.py [--image debian] [--quick] [--only codec,agent] [--timeout 1800]
    python bench/run_all.py --render-only      # docs/performance.md from bench/results.json

Each ``bench/*.py`` (except this one) prints one JSON object. The known scripts
get their own arguments (shorter runs with ``--quick``); a new script runs with
no arguments and the image in ``ADARE_BENCH_IMAGE``. The markdown table puts
each of our figures beside the alternative measured in the same run, under a
header naming the machine, the accelerator and the date; the full figures of
every script follow. Only the part of docs/performance.md between the
``bench:begin``/``bench:end`` markers is replaced. ``--only`` refreshes those scripts'
figures and keeps the others under the earlier run's header; each refreshed script's
section says when it ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results.json"
PERFORMANCE = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
ORDER = (
    "codec",
    "plugin_load",
    "agent",
    "boot",
    "runtime",
    "warm_start",
    "agent_perf",
    "serial_link",
    "isolation",
    "evidence",
    "film",
)


def arguments(name: str, image: str, quick: bool) -> list[str]:
    """The command-line arguments of one known script (none for unknown ones)."""
    table: dict[str, tuple[list[str], list[str]]] = {
        "codec": ([], ["--seconds", "0.05"]),
        "plugin_load": ([], ["--runs", "5", "--imports", "3"]),
        "evidence": (["--image", image], ["--image", image, "--runs", "1"]),
        # the film is of a desktop: the built-in one, whatever image the rest boots
        "film": (["--image", "debian-desktop"], ["--image", "debian-desktop", "--seconds", "6"]),
        "agent": ([], ["--rounds", "30", "--no-serial"]),
        "boot": (["--image", image], ["--image", image, "--runs", "1"]),
        "runtime": ([image], [image]),
        "isolation": (["--image", image], ["--image", image, "--tests", "3"]),
        "warm_start": (["--image", image], ["--image", image, "--runs", "1"]),
        "agent_perf": (["--image", image], ["--image", image, "--n", "20"]),
        "serial_link": (["--image", image], ["--image", image, "--mib", "2", "--uart-kib", "64"]),
        "lan": (["--image", image], ["--image", image, "--megabytes", "5"]),
        # the built-in images by their init, whatever image the rest boots
        "real_installs": (["--build"], ["--warm", "1"]),
    }
    full, short = table.get(name, ([], []))
    return short if quick else full


@dataclass(frozen=True)
class Comparison:
    """One table row: our figure at ``ours`` beside the alternative at ``theirs``.

    Paths are key tuples into the script's JSON; ``*`` matches any key and the
    same key is used in ``theirs``.
    """

    bench: str
    label: str
    ours: tuple[str, ...]
    alternative: str
    theirs: tuple[str, ...] | None
    unit: str
    lower_is_better: bool
    floor: bool = False  # the baseline is a lower bound to approach, not a rival to beat


BUILD = ("build_s",)
COLD = ("cold", "median_qemu_start_to_first_tool_s")
WARM = ("warm", "median_qemu_start_to_first_tool_s")
"""Figures of one image in ``bench/real_installs.py``'s JSON."""


def _installs(
    label: str, image: str, ours: tuple[str, ...], alternative: str, versus: str,
    theirs: tuple[str, ...],
) -> Comparison:  # fmt: skip
    """A ``real_installs`` row: one image's figure beside another's (or its own other one)."""
    return Comparison(
        "real_installs", label, ("images", image, *ours), alternative,
        ("images", versus, *theirs), "s", True,
    )  # fmt: skip


COMPARISONS = (
    Comparison(
        "agent",
        "`AsyncGuest.pull` 64 MiB, binary messages, localhost, median of 3",
        ("host_client", "pull_64mib_mb_per_s"),
        "one sha256 + one copy of the same file (floor)",
        ("host_client", "floor_sha256_and_copy_mb_per_s"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "agent",
        "`AsyncGuest.push` 64 MiB, binary messages, localhost, median of 3",
        ("host_client", "push_64mib_mb_per_s"),
        "one sha256 + one copy of the same file (floor)",
        ("host_client", "floor_sha256_and_copy_mb_per_s"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "agent",
        '`AsyncGuest.fs_snapshot("/usr")`, localhost, median of 3',
        ("host_client", "snapshot_usr_s"),
        "`find /usr -printf` of the same fields (floor)",
        ("host_client", "floor_find_printf_s"),
        "s",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        '`AsyncGuest.call("get_timestamp")` p50, localhost',
        ("host_client", "get_timestamp", "p50_ms"),
        "a bare WebSocket ping on the same agent (floor)",
        ("host_client", "floor_websocket_ping", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        '`AsyncGuest.shell("true")` p50, localhost',
        ("host_client", "execute_shell_true", "p50_ms"),
        '`subprocess.run(["true"])` on the host (floor)',
        ("host_client", "floor_local_subprocess_true", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        "`Guest.pull` 64 MiB (the sync facade a test uses), localhost, median of 3",
        ("sync_guest", "pull_64mib_mb_per_s", "median"),
        "one sha256 + one copy of the same file (floor)",
        ("sync_guest", "floor_sha256_and_copy_mb_per_s", "median"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "agent",
        '`Guest.fs_snapshot("/usr")` (sync facade), localhost, median of 3',
        ("sync_guest", "snapshot_usr_s", "median"),
        "`find /usr -printf` of the same fields (floor)",
        ("sync_guest", "floor_find_printf_s", "median"),
        "s",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        '`Guest.call("get_timestamp")` p50 (sync facade), localhost',
        ("sync_guest", "get_timestamp", "p50_ms"),
        "a WebSocket ping sent from the same thread through the same loop (floor)",
        ("sync_guest", "floor_websocket_ping", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        '`Guest.shell("true")` p50 (sync facade), localhost',
        ("sync_guest", "execute_shell_true", "p50_ms"),
        '`subprocess.run(["true"])` on the host (floor)',
        ("sync_guest", "floor_local_subprocess_true", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        "pull of 4 MiB over the serial link (socat pty), localhost",
        ("serial_throughput", "pull_4mib_mb_per_s"),
        "the same bytes through the raw pty/socket pair (floor)",
        ("serial_throughput", "floor_raw_pty_socket_mb_per_s"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "plugin_load",
        "`pytest --version` in an empty directory, plugin installed, median",
        ("pytest_version", "with_plugin", "median_ms"),
        "the same with `-p no:adare`",
        ("pytest_version", "without", "median_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "plugin_load",
        "importing `pytest_adare.plugin` after pytest (`-X importtime`), median",
        ("import_ms", "pytest_adare_plugin"),
        "—",
        None,
        "ms",
        True,
    ),
    Comparison(
        "agent_perf",
        'execute_shell("true") p50 (posix_spawn + pidfd)',
        ("shell", "agent_p50_ms"),
        "posix_spawn sh -c true + waitpid in the guest (floor)",
        ("shell", "floor_posix_spawn_sh_c_true_p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent_perf",
        "fs snapshot of /usr, record pages, host wall to FsSnapshot",
        ("snapshot", "lines_s"),
        "find /usr -printf of the same fields, in the guest",
        ("snapshot", "find_in_guest_s"),
        "s",
        True,
        floor=True,
    ),
    _installs("`adare-image build debian-systemd`, empty cache", "debian-systemd", BUILD,
              "the busybox console image's build, same run", "debian", BUILD),
    _installs("`adare-image build debian-xfce`, empty cache", "debian-xfce", BUILD,
              "the busybox console image's build, same run", "debian", BUILD),
    _installs("`debian-systemd` cold boot: QEMU start → first tool answered", "debian-systemd",
              COLD, "the busybox console image's cold boot, same run", "debian", COLD),
    _installs("`debian-systemd` warm start: QEMU start → first tool answered, median",
              "debian-systemd", WARM, "its cold boot (systemd, the agent's unit)",
              "debian-systemd", COLD),
    _installs("`debian-xfce` warm start: QEMU start → first tool answered, median",
              "debian-xfce", WARM,
              "its cold boot (systemd, LightDM's autologin, the XFCE session)", "debian-xfce",
              COLD),
    Comparison(
        "warm_start",
        "warm start: QEMU start → first tool answered (saved ready state), median",
        ("warm", "median_qemu_start_to_first_tool_s"),
        "cold boot, same image",
        ("cold", "median_qemu_start_to_first_tool_s"),
        "s",
        True,
    ),
    Comparison(
        "boot",
        "boot (*): QEMU start → agent answering, median",
        ("*", "median_seconds_from_qemu_start", "agent"),
        "QGA answering",
        ("*", "median_seconds_from_qemu_start", "qga"),
        "s",
        True,
    ),
    Comparison(
        "boot",
        "boot (*): QEMU start → init ready (kernel + init), median",
        ("*", "median_seconds_from_qemu_start", "init"),
        "—",
        None,
        "s",
        True,
    ),
    Comparison(
        "runtime",
        "QEMU start → first tool call answered",
        ("start_to_first_tool_answer_s",),
        "QGA first answer",
        ("start_to_first_qga_answer_s",),
        "s",
        True,
    ),
    Comparison(
        "isolation",
        "per-test clean state (snapshot restore), median",
        ("snapshot", "clean_state_seconds", "median"),
        "full reboot to ready",
        ("reboot", "clean_state_seconds", "median"),
        "s",
        True,
    ),
    Comparison(
        "lan",
        "warm start of a three-member LAN, first `lan.start` to the third resolving the others",
        ("start", "three_warm_s"),
        "the same three members' warm VM starts alone (floor)",
        ("start", "vm_starts_s"),
        "s",
        True,
        floor=True,
    ),
    Comparison(
        "lan",
        "TCP between two LAN members through the segment (python3 in both guests)",
        ("throughput", "segment_mb_s"),
        "the same transfer on the sender's own loopback (floor)",
        ("throughput", "loopback_mb_s"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "runtime",
        "tool round trip `get_timestamp`, p50",
        ("get_timestamp", "p50_ms"),
        "QGA `guest-exec` + status polling",
        ("qga_guest_exec_true", "p50_ms"),
        "ms",
        True,
    ),
    Comparison(
        "runtime",
        '`execute_shell("true")`, p50',
        ("execute_shell_true", "p50_ms"),
        "QGA `guest-exec` + status polling",
        ("qga_guest_exec_true", "p50_ms"),
        "ms",
        True,
    ),
    Comparison(
        "runtime",
        "file pull 64 MiB",
        ("pull_64mib", "agent_mb_s"),
        "QGA `guest-file-read`",
        ("pull_64mib", "qga_guest_file_read_mb_s"),
        "MB/s",
        False,
    ),
    Comparison(
        "runtime",
        "serial link `get_timestamp`, p50",
        ("serial_get_timestamp", "p50_ms"),
        "—",
        None,
        "ms",
        True,
    ),
    Comparison(
        "agent",
        "fs snapshot of /usr (agent on localhost)",
        ("snapshot", "snapshot_usr_files_per_s"),
        "`find -printf` of the same fields",
        ("snapshot", "baseline_find_printf_files_per_s"),
        "files/s",
        False,
    ),
    Comparison(
        "agent",
        "`get_timestamp` on localhost, p50",
        ("round_trip", "get_timestamp", "p50_ms"),
        "bare WebSocket ping",
        ("round_trip", "baseline_websocket_ping", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        '`execute_shell("true")` on localhost, p50',
        ("shell", "execute_shell_true", "p50_ms"),
        "local `subprocess.run`",
        ("shell", "baseline_local_subprocess_true", "p50_ms"),
        "ms",
        True,
        floor=True,
    ),
    Comparison(
        "agent",
        "pull 64 MiB on localhost",
        ("pull", "pull_64mib_mb_per_s"),
        "local `cat`",
        ("pull", "baseline_local_cat_mb_per_s"),
        "MB/s",
        False,
        floor=True,
    ),
    Comparison(
        "agent",
        "serial round trip `ping`, p50",
        ("serial", "serial_ping", "p50_ms"),
        "—",
        None,
        "ms",
        True,
    ),
    Comparison(
        "serial_link",
        "serial link (network off) pull on virtio-serial",
        ("virtio_serial", "pull_mib_s"),
        "the same link on the 16550 UART (`ttyS1`)",
        ("uart", "pull_mib_s"),
        "MiB/s",
        False,
    ),
    Comparison(
        "serial_link",
        "serial link (network off) push on virtio-serial",
        ("virtio_serial", "push_mib_s"),
        "the same link on the 16550 UART (`ttyS1`)",
        ("uart", "push_mib_s"),
        "MiB/s",
        False,
    ),
    Comparison(
        "vocabulary",
        "`wait_until_succeeds` of a command that passes on its third try, median",
        ("wait_until_succeeds_third_try_s", "median"),
        "the same command as three plain `shell` calls",
        ("three_plain_shell_calls_s", "median"),
        "s",
        True,
        floor=True,
    ),
    Comparison(
        "vocabulary",
        "`wait_for_text` of a line just typed, median",
        ("wait_for_text_first_match_s", "median"),
        "—",
        None,
        "s",
        True,
    ),
    Comparison(
        "vocabulary",
        "`wait_for_text` that times out after 5 s, median",
        ("wait_for_text_5s_timeout_s", "median"),
        "—",
        None,
        "s",
        True,
    ),
    Comparison(
        "matrix",
        "`test_forensic.py` on a two-image matrix (bullseye + bookworm), warm states",
        ("two_images_s",),
        "the same tests on one image",
        ("one_image_s",),
        "s",
        True,
        floor=True,
    ),
    Comparison(
        "image_build",
        "console image build, `update-initramfs` diverted while the packages go in",
        ("ours", "median_s"),
        "the same build packing the kernel's initramfs (never booted), interleaved",
        ("packing_initramfs", "median_s"),
        "s",
        True,
    ),
    Comparison(
        "rootless",
        "console image build as an ordinary user (mmdebstrap unshare mode)",
        ("rootless_build", "seconds"),
        "the same build as root",
        ("root_build", "seconds"),
        "s",
        True,
    ),
    Comparison(
        "websocket_server",
        "agent's own WebSocket server: `AsyncGuest.pull` 64 MiB, median of 5 interleaved",
        ("bench", "ours", "pull_64mib_mb_per_s", "median"),
        "the same agent served by `websockets` 15.0.1, pure Python (what a 3.9 bundle carries)",
        ("bench", "library", "pull_64mib_mb_per_s", "median"),
        "MB/s",
        False,
    ),
    Comparison(
        "websocket_server",
        "agent's own WebSocket server: `AsyncGuest.push` 64 MiB, median of 5 interleaved",
        ("bench", "ours", "push_64mib_mb_per_s", "median"),
        "the same agent served by `websockets` 15.0.1, pure Python",
        ("bench", "library", "push_64mib_mb_per_s", "median"),
        "MB/s",
        False,
    ),
    Comparison(
        "websocket_server",
        "agent's own WebSocket server: `get_timestamp` p50",
        ("bench", "ours", "get_timestamp", "p50_ms"),
        "the same agent served by `websockets` 15.0.1, pure Python",
        ("bench", "library", "get_timestamp", "p50_ms"),
        "ms",
        True,
    ),
    Comparison(
        "websocket_server",
        "agent's own WebSocket server: hardening probes held (docs/agent.md)",
        ("probes_held_count", "ours"),
        "the same probes against `websockets` 15.0.1",
        ("probes_held_count", "library"),
        "of 9",
        False,
    ),
    Comparison(
        "codec",
        "frame codec * (C CRC)",
        ("results", "*", "binascii_crc", "MB_per_s"),
        "pure-Python CRC",
        ("results", "*", "pure_python_crc", "MB_per_s"),
        "MB/s",
        False,
    ),
)


def figure(benchmarks: dict[str, Any], bench: str, *path: str) -> float | None:
    """One number of this run, or None when that script failed or did not report it."""
    result = benchmarks.get(bench, {}).get("result")
    return number(next((value for _, value in lookup(result, path)), None))


@dataclass(frozen=True)
class Goal:
    """One goal of issue 13: ``measure`` gives (our figure, the figure it must reach) from
    this run's results; ``limit`` says, from the same results, what holds a missed one back."""

    label: str
    target: str
    unit: str
    lower_is_better: bool
    measure: Callable[[dict[str, Any]], tuple[float | None, float | None]]
    limit: Callable[[dict[str, Any]], str]


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}" if a and b else "?"


def _start_limit(b: dict[str, Any]) -> str:
    init = figure(b, "boot", "*", "median_seconds_from_qemu_start", "init")
    agent = figure(b, "boot", "*", "median_seconds_from_qemu_start", "agent")
    gap = f"{agent - init:.2f}" if agent and init else "?"
    return (
        f"Python under emulation: of the {gap} s from the guest's init to the agent answering, "
        f"importing the agent's modules is {figure(b, 'agent_perf', 'agent_import', 'total_s')} "
        "s of guest time (agent_perf agent_import); the rest is the interpreter's own start, "
        "reading the zipped bundle and the agent's set-up, not broken down further"
    )


def _installed(b: dict[str, Any], image: str) -> float | None:
    return figure(b, "real_installs", "images", image, "warm", "median_qemu_start_to_first_tool_s")


def _load_limit(b: dict[str, Any], image: str) -> str:
    phases = (b.get("real_installs", {}).get("result") or {}).get("images", {}).get(image, {})
    warm = phases.get("warm", {}).get("phases", {})
    memory = phases.get("memory_mib")
    slowest = max(warm.items(), key=lambda item: number(item[1]) or 0.0, default=None)
    if slowest is None:
        return ""
    return (
        f"the slowest phase of its last warm start is {slowest[0]} ({slowest[1]} s); the saved "
        f"state holds the guest's RAM ({memory} MiB), read back from the cache"
    )


def _shell_limit(b: dict[str, Any]) -> str:
    floor = figure(b, "agent_perf", "shell", "floor_posix_spawn_sh_c_true_p50_ms")
    qga = figure(b, "runtime", "qga_guest_exec_true", "p50_ms")
    agent = figure(b, "agent_perf", "shell", "agent_p50_ms")
    return (
        f"`sh -c true` itself: `posix_spawn` + `waitpid` of it inside the guest takes {floor} ms "
        f"(agent_perf floor), so QGA is only {_ratio(qga, floor)}x the floor; the agent's path "
        f"is {_ratio(agent, floor)}x it"
    )


GOALS = (
    Goal(
        "QEMU start → first tool answered, second and later sessions (warm start)",
        "≤ 1.5 s",
        "s",
        True,
        lambda b: (figure(b, "warm_start", "warm", "median_qemu_start_to_first_tool_s"), 1.5),
        lambda b: "",
    ),
    Goal(
        "warm start of `debian-systemd` (systemd as PID 1)",
        "≤ 1.0 s",
        "s",
        True,
        lambda b: (_installed(b, "debian-systemd"), 1.0),
        lambda b: _load_limit(b, "debian-systemd"),
    ),
    Goal(
        "warm start of `debian-xfce` (the XFCE session up)",
        "≤ 1.5 s",
        "s",
        True,
        lambda b: (_installed(b, "debian-xfce"), 1.5),
        lambda b: _load_limit(b, "debian-xfce"),
    ),
    Goal(
        '`execute_shell("true")` p50',
        "≥ 3x faster than QGA `guest-exec` + polling",
        "ms",
        True,
        lambda b: (
            figure(b, "runtime", "execute_shell_true", "p50_ms"),
            (figure(b, "runtime", "qga_guest_exec_true", "p50_ms") or 0) / 3 or None,
        ),
        _shell_limit,
    ),
    Goal(
        "64 MiB pull (binary messages)",
        "≥ 3x QGA `guest-file-read`",
        "MB/s",
        False,
        lambda b: (
            figure(b, "runtime", "pull_64mib", "agent_mb_s"),
            (figure(b, "runtime", "pull_64mib", "qga_guest_file_read_mb_s") or 0) * 3 or None,
        ),
        lambda b: (
            "one emulated vCPU does both the streaming sha256 and the socket sends, one after "
            "the other (see Binary file transfer below)"
        ),
    ),
    Goal(
        "fs snapshot of /usr, host wall to a parsed FsSnapshot",
        "≥ 1.0x `find -printf` in the guest",
        "s",
        True,
        lambda b: (
            figure(b, "agent_perf", "snapshot", "lines_s"),
            figure(b, "agent_perf", "snapshot", "find_in_guest_s"),
        ),
        lambda b: (
            f"`find` only writes {figure(b, 'agent_perf', 'snapshot', 'entries') or 0:.0f} "
            "records to a file in the guest; the snapshot also carries them over the transport "
            "in pages and parses them into entries on the host"
        ),
    ),
    Goal(
        "per-test snapshot restore, median",
        "≤ 0.15 s",
        "s",
        True,
        lambda b: (figure(b, "isolation", "snapshot", "clean_state_seconds", "median"), 0.15),
        lambda b: (
            f"of one restore, `loadvm` takes "
            f"{figure(b, 'isolation', 'restore_breakdown', 'loadvm_ms')} ms and the reconnect "
            f"{figure(b, 'isolation', 'restore_breakdown', 'reconnect_ms')} ms: TCG re-translates "
            "the guest's code after `loadvm` (see Warm start and the per-test restore)"
        ),
    ),
    Goal(
        "agent answering after a cold boot, median",
        "≤ QGA + 1 s",
        "s",
        True,
        lambda b: (
            figure(b, "boot", "*", "median_seconds_from_qemu_start", "agent"),
            (figure(b, "boot", "*", "median_seconds_from_qemu_start", "qga") or 0) + 1 or None,
        ),
        _start_limit,
    ),
    Goal(
        "serial link pull, network off (virtio-serial)",
        "≥ 5 MB/s",
        "MB/s",
        False,
        lambda b: (
            (figure(b, "serial_link", "virtio_serial", "pull_mib_s") or 0) * 1.048576 or None,
            5.0,
        ),
        lambda b: (
            "the DV link layer: one fragment of a 1 KiB frame per round trip through the "
            "guest's Python (DESIGN §4 fixes the frame); the UART in the same run: "
            f"{figure(b, 'serial_link', 'uart', 'pull_mib_s')} MiB/s"
        ),
    ),
)


def _host(b: dict[str, Any], *path: str) -> float | None:
    return figure(b, "agent", "host_client", *path)


def _sync(b: dict[str, Any], *path: str) -> float | None:
    return figure(b, "agent", "sync_guest", *path)


def _times(value: float | None, factor: float) -> float | None:
    return value * factor if value else None


def _transfer_limit(b: dict[str, Any]) -> str:
    return (
        "both ends hash every byte (sha256, ~2 GB/s a core here) and the 2 cores are "
        "shared with the other work on the machine: the agent's read + hash, the host's "
        "hash + write, and the two processes' socket copies"
    )


GOALS_28 = (
    Goal(
        "localhost pull, 64 MiB (`Guest.pull`, the sync facade, binary)",
        "≥ 1 GB/s and ≥ 0.75x one sha256 + one copy",
        "MB/s",
        False,
        lambda b: (
            _sync(b, "pull_64mib_mb_per_s", "median"),
            max(1000.0, _times(_sync(b, "floor_sha256_and_copy_mb_per_s", "median"), 0.75) or 0)
            or None,
        ),
        _transfer_limit,
    ),
    Goal(
        "localhost push, 64 MiB (`AsyncGuest.push`, binary)",
        "≥ 1 GB/s and ≥ 0.75x one sha256 + one copy",
        "MB/s",
        False,
        lambda b: (
            _host(b, "push_64mib_mb_per_s"),
            max(1000.0, _times(_host(b, "floor_sha256_and_copy_mb_per_s"), 0.75) or 0) or None,
        ),
        lambda b: (
            _transfer_limit(b) + "; and the agent unmasks the client's frames in pure "
            "Python (big-integer XOR, ~1.1 GB/s)"
        ),
    ),
    Goal(
        '`Guest.fs_snapshot("/usr")`, localhost',
        "≥ 0.8x a bare `find` of the same fields (time ≤ find / 0.8)",
        "s",
        True,
        lambda b: (
            _sync(b, "snapshot_usr_s", "median"),
            _times(_sync(b, "floor_find_printf_s", "median"), 1.25),
        ),
        lambda b: (
            "pages arrive at find's own pace (the agent reads the next page ahead); what is "
            "left is find's first page, the last page's parse, and find, agent and host "
            "sharing the 2 cores (about 0.9 CPU-seconds in all for /usr)"
        ),
    ),
    Goal(
        "tool round trip (`Guest.call(\"get_timestamp\")`) p50, localhost",
        "≤ 3x a bare WebSocket ping",
        "ms",
        True,
        lambda b: (
            _sync(b, "get_timestamp", "p50_ms"),
            _times(_host(b, "floor_websocket_ping", "p50_ms"), 3),
        ),
        lambda b: (
            "the sync facade's hop to the shared loop thread and back: a ping sent the same "
            f"way takes {_sync(b, 'floor_websocket_ping', 'p50_ms')} ms, a bare one "
            f"{_host(b, 'floor_websocket_ping', 'p50_ms')} ms; the call itself through "
            f"`AsyncGuest` {_host(b, 'get_timestamp', 'p50_ms')} ms (JSON envelope, parameter "
            "check, one task and a reply per call in both Pythons)"
        ),
    ),
    Goal(
        '`Guest.shell("true")` p50, localhost',
        "≤ 1.5x a local spawn",
        "ms",
        True,
        lambda b: (
            _sync(b, "execute_shell_true", "p50_ms"),
            _times(_sync(b, "floor_local_subprocess_true", "p50_ms"), 1.5),
        ),
        lambda b: (
            "the round trip above on top of the spawn, and the agent's spawn is the "
            "floor's plus a pidfd wait and the output pipes' reads on its loop"
        ),
    ),
    Goal(
        "serial link throughput (pull over a socat pty), localhost",
        "within 2x the raw pty/socket",
        "MB/s",
        False,
        lambda b: (
            figure(b, "agent", "serial_throughput", "pull_4mib_mb_per_s"),
            _times(figure(b, "agent", "serial_throughput", "floor_raw_pty_socket_mb_per_s"), 0.5),
        ),
        lambda b: (
            "the DV link layer: 1 KiB frames (DESIGN §4), each one a Python round of "
            "framing, CRC and acknowledgement on both ends"
        ),
    ),
    Goal(
        "agent answering after a cold boot (TCG), median",
        "≤ QGA + 1 s",
        "s",
        True,
        lambda b: (
            figure(b, "boot", "*", "median_seconds_from_qemu_start", "agent"),
            (figure(b, "boot", "*", "median_seconds_from_qemu_start", "qga") or 0) + 1 or None,
        ),
        _start_limit,
    ),
    Goal(
        "warm start: QEMU start → first tool answered, median",
        "≤ 0.7 s",
        "s",
        True,
        lambda b: (figure(b, "warm_start", "warm", "median_qemu_start_to_first_tool_s"), 0.7),
        lambda b: "TCG: `loadvm` of the ready state and re-translating the guest's code",
    ),
    Goal(
        "per-test restore, median",
        "≤ 0.25 s",
        "s",
        True,
        lambda b: (figure(b, "isolation", "snapshot", "clean_state_seconds", "median"), 0.25),
        lambda b: (
            f"`loadvm` {figure(b, 'isolation', 'restore_breakdown', 'loadvm_ms')} ms and the "
            f"reconnect {figure(b, 'isolation', 'restore_breakdown', 'reconnect_ms')} ms (TCG)"
        ),
    ),
    Goal(
        "host peak RSS, snapshot + diff of 1 M files (scale)",
        "≤ 0.5 GiB",
        "MiB",
        True,
        lambda b: (
            figure(b, "scale", "fit", "largest_tree_host_peak_rss_mib")
            if (figure(b, "scale", "fit", "largest_tree_entries") or 0) >= 1_000_000
            else None,
            512.0,
        ),
        lambda b: (
            "two snapshots of a million entries are held at once (before and after): as "
            "columns (65 bytes an entry), one path string and one row number shared by "
            "both, and each its path -> row dict (about 30 bytes an entry); "
            f"{figure(b, 'scale', 'fit', 'host_rss_mib_per_million_entries')} MiB per "
            "million entries in all, before 792 with a tuple per entry"
        ),
    ),
)


def goal_rows(benchmarks: dict[str, Any], goals: tuple[Goal, ...] = GOALS) -> list[list[str]]:
    """Markdown cells per goal: target, this run's figure, met or not, what limits a miss."""
    rows = []
    for goal in goals:
        ours, needed = goal.measure(benchmarks)
        if ours is None or needed is None:
            rows.append([goal.label, goal.target, "not measured", "—", "the script failed"])
            continue
        met = ours <= needed if goal.lower_is_better else ours >= needed
        rows.append(
            [
                goal.label,
                goal.target,
                f"{ours:.3g} {goal.unit} (needed {needed:.3g})",
                "met" if met else "**missed**",
                "" if met else goal.limit(benchmarks),
            ]
        )
    return rows


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:g} s"


def restore_rows(b: dict[str, Any]) -> list[list[str]]:
    """Each step of one per-test restore, median over the isolation script's restores."""
    steps = (
        ("close the agent connection", "disconnect_ms"),
        ("`loadvm` (the RAM from the overlay's internal snapshot)", "loadvm_ms"),
        ("reconnect (handshake + `connect`)", "reconnect_ms"),
        ("first tool call", "first_call_ms"),
    )
    found = [(label, figure(b, "isolation", "restore_breakdown", key)) for label, key in steps]
    return [[label, f"{ms:g} ms"] for label, ms in found if ms is not None]


def ocr_rows(b: dict[str, Any]) -> list[list[str]]:
    """Per screen of the OCR script: exact reads, a full read, a wait, CLI vs in-process."""
    rows = []
    for screen in ("console", "desktop"):
        result = b.get("ocr", {}).get("result") or {}
        if not isinstance(result.get(screen), dict):
            continue
        size = "x".join(str(v) for v in result[screen].get("screen", ()))

        def get(*path: str, screen: str = screen) -> float | None:
            return figure(b, "ocr", screen, *path)

        rows.append(
            [
                f"{screen} image, {size}",
                f"{get('exact_first_screenshot') or 0:g} / {get('markers') or 0:g}",
                f"median {_seconds(get('read_all_variants_s', 'median'))}, "
                f"max {_seconds(get('read_all_variants_s', 'max'))}",
                f"median {_seconds(get('wait_for_text_s', 'median'))}",
                f"{_seconds(get('cli_vs_inprocess', 'cli_s'))} vs "
                f"{_seconds(get('cli_vs_inprocess', 'inprocess_s'))}",
            ]
        )
    return rows


def backend_rows(b: dict[str, Any]) -> list[list[str]]:
    """Per machine backend of the libvirt script: start, restore, ``shell("true")``."""
    result = b.get("libvirt_backend", {}).get("result")
    backends = result if isinstance(result, list) else []
    return [
        [
            str(run.get("backend")),
            _seconds(number(run.get("start_s"))),
            _seconds(number(run.get("restore_p50_s"))),
            f"{run.get('shell_true_p50_ms')} ms",
        ]
        for run in backends
        if isinstance(run, dict)
    ]


def scale_rows(b: dict[str, Any]) -> list[list[str]]:
    """Per tree size and pull size of the scale script, and the fitted slopes."""
    result = b.get("scale", {}).get("result")
    if not isinstance(result, dict):
        return []
    rows = []
    for tree in result.get("tree", []):
        rows.append(
            [
                f"snapshot + diff, {tree.get('entries')} entries",
                f"{tree.get('snapshot_s')} s + {tree.get('diff_s')} s",
                f"host {tree.get('host_peak_rss_mib')} MiB, "
                f"agent {tree.get('agent_peak_rss_mib')} MiB",
            ]
        )
    for pull in result.get("pull", []):
        if "skipped" in pull:
            rows.append([f"pull {pull['mib']} MiB", "skipped", pull["skipped"]])
        else:
            rows.append(
                [f"pull {pull['mib']} MiB", f"{pull['seconds']} s", f"{pull['mb_per_s']} MB/s"]
            )
    fit = result.get("fit", {})
    if fit:
        rows.append(
            [
                "linear fit (slope, r²)",
                f"snapshot {fit.get('snapshot_us_per_entry')} µs/entry "
                f"(r² {fit.get('snapshot_r2')}), diff {fit.get('diff_us_per_entry')} µs/entry "
                f"(r² {fit.get('diff_r2')}), pull {fit.get('pull_s_per_gib')} s/GiB "
                f"(r² {fit.get('pull_r2')})",
                f"host memory {fit.get('host_rss_mib_per_million_entries')} MiB per million "
                f"entries (r² {fit.get('host_rss_r2')})",
            ]
        )
    vms = result.get("warm_start_at_once")
    if isinstance(vms, dict):
        errors = f"; errors {vms['errors']}" if vms.get("errors") else ""
        rows.append(
            [
                f'{vms.get("vms")} VMs warm-started at once (`launch("{vms.get("image")}")`)',
                f"all ready after {vms.get('all_ready_s')} s",
                f"each ready at {vms.get('ready_s')} s{errors}",
            ]
        )
    if result.get("plot"):
        rows.append(["curves", f"![scale]({Path(result['plot']).name})", ""])
    return rows


Rows = Callable[[dict[str, Any]], list[list[str]]]
DETAIL_TABLES: tuple[tuple[str, tuple[str, ...], Rows], ...] = (
    # (title, column headers, the rows from this run's results)
    ("Per-test restore, step by step (isolation, median)", ("step", "time"), restore_rows),
    ("How cost grows (scale, localhost)", ("work", "time", "memory / rate"), scale_rows),
    (
        "Screen text (OCR): markers, each read from the first screenshot after it (ocr)",
        ("screen", "exact reads", "one full read (every variant)", "`wait_for_text` until found",
         "tesseract CLI vs in-process, same images"),
        ocr_rows,
    ),
    (
        "Machine backends (libvirt_backend)",
        ("backend", "start", "restore, median", '`shell("true")`, median'),
        backend_rows,
    ),
)  # fmt: skip


def discover(only: set[str] | None) -> list[str]:
    """Benchmark script names in a stable order: the known ones first."""
    found = {p.stem for p in BENCH.glob("*.py") if p.stem not in ("run_all", "__init__")}
    names = [n for n in ORDER if n in found] + sorted(found - set(ORDER))
    return [n for n in names if only is None or n in only]


def parse_json_output(stdout: str) -> Any:
    """The JSON object a script printed (the last one, if it printed more than JSON)."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        start = stdout.rfind("\n{")
        return json.loads(stdout[start + 1 if start >= 0 else stdout.index("{") :])


def run_script(name: str, image: str, quick: bool, timeout: float) -> dict[str, Any]:
    """Run one script; its figures, or the error with the tail of its stderr."""
    command = [sys.executable, str(BENCH / f"{name}.py"), *arguments(name, image, quick)]
    env = {**os.environ, "ADARE_BENCH_IMAGE": image}
    print(f"bench: {name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "seconds": timeout, "error": f"did not finish within {timeout:.0f} s"}
    outcome: dict[str, Any] = {
        "ok": done.returncode == 0,
        "seconds": round(time.monotonic() - started, 1),
    }
    try:
        outcome["result"] = parse_json_output(done.stdout)
    except (json.JSONDecodeError, ValueError):
        outcome["ok"] = False
    if not outcome["ok"]:
        tail = done.stderr.strip().splitlines()[-15:]
        outcome["error"] = f"exit code {done.returncode}: " + "\n".join(tail)
    print(
        f"bench: {name}: {'ok' if outcome['ok'] else 'FAILED'} in {outcome['seconds']} s",
        file=sys.stderr,
        flush=True,
    )
    return outcome


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    try:
        qemu = subprocess.run(
            ["qemu-system-x86_64", "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        qemu = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "qemu": qemu,
    }


def accelerator(benchmarks: dict[str, Any]) -> str:
    """The accelerator a VM benchmark reported, else what /dev/kvm allows."""
    for outcome in benchmarks.values():
        result = outcome.get("result")
        if isinstance(result, dict) and isinstance(result.get("accel"), str):
            return str(result["accel"])
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    return "kvm (available, no VM benchmark ran)" if usable else "tcg (no usable /dev/kvm)"


def lookup(document: Any, path: tuple[str, ...]) -> Iterator[tuple[list[str], Any]]:
    """(keys matched by ``*``, value) for every match of ``path``."""
    if not path:
        yield [], document
        return
    if not isinstance(document, dict):
        return
    head, rest = path[0], path[1:]
    keys = list(document) if head == "*" else [head] if head in document else []
    for key in keys:
        for bound, value in lookup(document[key], rest):
            yield ([key] if head == "*" else []) + bound, value


def bind(path: tuple[str, ...], keys: list[str]) -> tuple[str, ...]:
    filled = iter(keys)
    return tuple(next(filled) if part == "*" else part for part in path)


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def compare(ours: float, theirs: float | None, spec: Comparison) -> str:
    """``3.1x better`` / ``1.5x worse`` against a rival; ``4.2x the floor`` against a bound."""
    if not theirs or not ours:
        return "—"
    ratio = theirs / ours if spec.lower_is_better else ours / theirs
    if spec.floor:
        return f"{1 / ratio:.1f}x the floor"
    return f"{ratio:.1f}x better" if ratio >= 1 else f"{1 / ratio:.1f}x worse"


def comparison_rows(benchmarks: dict[str, Any]) -> list[list[str]]:
    """Markdown cells for every comparison whose figures exist in this run."""
    rows = []
    for spec in COMPARISONS:
        result = benchmarks.get(spec.bench, {}).get("result")
        for keys, value in lookup(result, spec.ours):
            ours = number(value)
            if ours is None:
                continue
            label = spec.label.replace("*", ", ".join(keys)) if keys else spec.label
            theirs = None
            if spec.theirs is not None:
                theirs = number(next((v for _, v in lookup(result, bind(spec.theirs, keys))), None))
            advantage = compare(ours, theirs, spec)
            rows.append(
                [
                    label,
                    f"{ours:g} {spec.unit}",
                    spec.alternative,
                    f"{theirs:g} {spec.unit}" if theirs is not None else "—",
                    advantage,
                    spec.bench,
                ]
            )
    return rows


def flatten(document: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(document, dict):
        for key, value in document.items():
            yield from flatten(value, f"{prefix}/{key}" if prefix else str(key))
    else:
        yield prefix, document


def markdown(report: dict[str, Any]) -> str:
    """The generated part of docs/performance.md."""
    info = report["machine"]
    lines = [
        BEGIN,
        f"Measured {report['date']} on {info['cpu']} ({info['cores']} cores, "
        f"{info['memory_gib']} GiB), {info['os']}, Python {info['python']}, "
        f"{info['qemu'] or 'QEMU not found'}; accel **{report['accel']}**; image "
        f"`{report['image']}`{'; quick run (shortened)' if report['quick'] else ''}.",
        "Generated by `python bench/run_all.py`; raw figures in `bench/results.json`.",
        "",
        "| figure | pytest-adare | compared against (same run) | its figure | ours | script |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in comparison_rows(report["benchmarks"])]
    lines.append("")
    lines.append(
        "*better/worse*: against the alternative a user would otherwise use; "
        "*the floor*: against a lower bound (no protocol at all), i.e. our overhead."
    )
    lines += [
        "",
        "### The goals of issue 13, in this run",
        "",
        "| goal | target | this run | | what limits it |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in goal_rows(report["benchmarks"])]
    lines += [
        "",
        "### The goals of issues 28 and 40 (the overhead a user feels, as deployed), in this run",
        "",
        "The agent as images start it (`agent_config` in `bench/results.json`: its log "
        "level, a config file); the host through the sync `Guest` a test's `guest` is.",
        "",
        "| goal | target | this run | | what limits it |",
        "|---|---|---|---|---|",
    ]
    lines += [
        "| " + " | ".join(cells) + " |" for cells in goal_rows(report["benchmarks"], GOALS_28)
    ]
    for title, header, rows_of in DETAIL_TABLES:
        rows = rows_of(report["benchmarks"])
        if rows:
            lines += ["", f"### {title}", "", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header)]  # fmt: skip
            lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    for name, outcome in report["benchmarks"].items():
        when = f", measured {outcome['date']} by `--only`" if "date" in outcome else ""
        lines += ["", f"### {name} ({outcome['seconds']} s{when})", ""]
        if not outcome["ok"]:
            lines += ["Failed:", "", "```", outcome.get("error", "?"), "```"]
            continue
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in flatten(outcome["result"])]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_performance(text: str) -> None:
    """Replace the generated part of docs/performance.md (create the file if needed)."""
    if PERFORMANCE.exists():
        current = PERFORMANCE.read_text()
        if BEGIN in current and END in current:
            head, _, rest = current.partition(BEGIN)
            _, _, tail = rest.partition(END)
            PERFORMANCE.write_text(head + text.rstrip("\n") + tail)
            return
        PERFORMANCE.write_text(current.rstrip("\n") + "\n\n" + text)
        return
    PERFORMANCE.write_text(
        "# Performance\n\nEach figure of pytest-adare beside the alternative it replaces, "
        "measured in the same run on the same machine (DESIGN §7).\n\n" + text
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="debian", help="image for the VM benchmarks")
    parser.add_argument("--quick", action="store_true", help="shorter runs (fewer rounds)")
    parser.add_argument("--only", help="comma-separated script names (default: all)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per script")
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite the docs from bench/results.json"
    )
    args = parser.parse_args(argv)
    if args.render_only:
        write_performance(markdown(json.loads(RESULTS.read_text())))
        return 0
    only = set(args.only.split(",")) if args.only else None
    names = discover(only)
    if not names:
        parser.error(f"no benchmark scripts to run in {BENCH} (only={args.only})")
    benchmarks = {name: run_script(name, args.image, args.quick, args.timeout) for name in names}
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    report = {
        "date": now,
        "image": args.image,
        "quick": args.quick,
        "machine": machine(),
        "accel": accelerator(benchmarks),
        "benchmarks": benchmarks,
    }
    if only is not None and RESULTS.is_file():
        # --only refreshes those scripts and keeps the rest under the earlier run's header;
        # each refreshed script's section says when it ran.
        previous = json.loads(RESULTS.read_text())
        for outcome in benchmarks.values():
            outcome["date"] = now
        report = {**previous, "benchmarks": {**previous.get("benchmarks", {}), **benchmarks}}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    write_performance(markdown(report))
    print(json.dumps({name: outcome["ok"] for name, outcome in benchmarks.items()}))
    return 0 if all(outcome["ok"] for outcome in benchmarks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
