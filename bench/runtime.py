"""Runtime benchmark: one VM, one run, each figure beside what it beats (JSON on stdout).

    python bench/runtime.py [IMAGE]        # IMAGE: manifest, directory or built-in name

Figures: QEMU start → first tool call answered (beside QGA's first answer);
``get_timestamp`` and ``execute_shell("true")`` round trips (beside QGA ``guest-exec``
+ ``guest-exec-status`` polling); 64 MiB pull MB/s over binary messages and over the
JSON chunks (beside QGA ``guest-file-read``); serial-transport round trip. Agent and QGA
samples alternate (shell: rounds of 5 + 2; pull: binary, JSON, QGA, twice) so a load
swing on a shared host hits all alike.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_adare.agent.transfer import pull_file
from pytest_adare.image.resolve import resolve_image
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine_tools.qga import QGAClient
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "n": len(ordered),
    }


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


def interleaved(
    ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int, n_ours: int, n_theirs: int
) -> tuple[list[float], list[float]]:
    """Time ``n_ours`` runs of ``ours`` then ``n_theirs`` of ``theirs``, ``rounds`` times."""
    ours_samples: list[float] = []
    theirs_samples: list[float] = []
    for _ in range(rounds):
        ours_samples += timed(ours, n_ours)
        theirs_samples += timed(theirs, n_theirs)
    return ours_samples, theirs_samples


def rotated(fns: list[Callable[[], Any]], rounds: int) -> list[list[float]]:
    """Time each of ``fns`` once per round, in turn; the samples of each."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, own in zip(fns, samples, strict=True):
            own += timed(fn, 1)
    return samples


def mb_s(size: int, samples: list[float]) -> float:
    return round(size * len(samples) / sum(samples) / 1e6, 1)


def main(image: str) -> dict[str, Any]:
    manifest = resolve_image(image, progress=lambda line: print(line, file=sys.stderr))
    workdir = Path(tempfile.mkdtemp(prefix="adare-bench-"))
    # Cold: the start figures race QGA from QEMU's launch (warm starts: bench/warm_start.py).
    vm = VM(manifest, workdir, VMOptions(warm="off"), name="bench")
    qga_first: dict[str, float] = {}
    t0 = time.perf_counter()

    def on_progress(line: str) -> None:
        print(line, file=sys.stderr)
        if " qemu: " in line and not qga_first:  # QEMU runs: race QGA against the agent
            qga_first["started"] = time.perf_counter()
            threading.Thread(target=wait_for_qga, daemon=True).start()

    def wait_for_qga() -> None:
        with QGAClient(vm.machine.qga_path) as qga:
            qga.sync(timeout=300)
        qga_first["answered"] = time.perf_counter()

    try:
        vm.start(progress=on_progress)
        vm.guest.call("get_timestamp")
        agent_ready = time.perf_counter() - t0
        qemu_up = qga_first["started"] - t0
        deadline = time.monotonic() + 300
        while "answered" not in qga_first and time.monotonic() < deadline:
            time.sleep(0.05)
        figures: dict[str, Any] = {
            "accel": vm.machine.accel,
            "phases_s": {p.name: round(p.seconds, 3) for p in vm.phases},
            "start_to_first_tool_answer_s": round(agent_ready, 3),
            "start_to_first_qga_answer_s": round(qga_first.get("answered", float("nan")) - t0, 3),
            "qemu_launch_s": round(qemu_up, 3),
        }
        guest = vm.guest
        figures["get_timestamp"] = percentiles(timed(lambda: guest.call("get_timestamp"), 200))
        qga = vm.qga
        # Agent and QGA samples alternate, so a load swing on the (shared) host hits both.
        shell, qga_exec = interleaved(
            lambda: guest.shell("true"), lambda: shared_loop().run(qga.exec(["true"])), 10, 5, 2
        )
        figures["execute_shell_true"] = percentiles(shell)
        figures["qga_guest_exec_true"] = percentiles(qga_exec)
        guest.shell("head -c 64M /dev/urandom > /tmp/bench-64m").check()
        size = 64 * 2**20

        def json_chunks() -> None:  # the reference host's form, forced
            pull = pull_file(guest.aio.call, "/tmp/bench-64m", workdir / "pulled-json")
            shared_loop().run(pull, 600)

        binary_s, json_s, qga_s = rotated(
            [
                lambda: guest.pull("/tmp/bench-64m", workdir / "pulled"),
                json_chunks,
                lambda: shared_loop().run(qga.file_read("/tmp/bench-64m", timeout=600)),
            ],
            2,
        )
        figures["pull_64mib"] = {
            "agent_mb_s": mb_s(size, binary_s),
            "agent_json_chunks_mb_s": mb_s(size, json_s),
            "qga_guest_file_read_mb_s": mb_s(size, qga_s),
        }
        figures["serial_get_timestamp"] = serial_round_trip(vm)
        return figures
    finally:
        vm.close()


def serial_round_trip(vm: VM) -> dict[str, Any]:
    try:
        from pytest_adare.agent.serial_client import SerialAgentClient
    except ImportError as exc:
        return {"error": f"serial client unavailable: {exc}"}
    client = shared_loop().run(SerialAgentClient.connect(vm.machine.agent_serial_path), 60)
    try:
        samples = timed(lambda: shared_loop().run(client.call("get_timestamp", {}, 30)), 30)
        return percentiles(samples)
    finally:
        shared_loop().run(client.close(), 30)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "debian"), indent=2))
