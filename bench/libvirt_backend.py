"""The cost of a test on each machine backend: QEMU started here, and a libvirt domain
(JSON on stdout).

    python bench/libvirt_backend.py [URI ...]     # default: qemu:///system

Per backend, one VM of the built-in console image (serial transport, no network, warm
start off, so every backend boots cold the same way): start until the agent answers
(``VM.start``), the per-test restore (``restore_ready``: ``loadvm`` + reconnect, median
of 5) and a tool round trip (``execute_shell("true")``, median of 20). The first libvirt
start of an image also uploads its base disk into the pool; run twice to see the warm
figure. Remote URIs (``qemu+ssh://...``) work the same.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare.image.resolve import resolve_image
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions


def measure(hypervisor: str | None) -> dict[str, Any]:
    options = VMOptions(transport="serial", network=False, warm="off", hypervisor=hypervisor)
    with tempfile.TemporaryDirectory(prefix="bench-libvirt-") as workdir:
        vm = VM(resolve_image("debian"), Path(workdir), options)
        try:
            started = time.perf_counter()
            vm.start()
            start = time.perf_counter() - started
            vm.save_ready()
            restores = []
            for _ in range(5):
                vm.guest.shell("touch /root/dirty").check()
                t = time.perf_counter()
                vm.restore_ready()
                restores.append(time.perf_counter() - t)
            calls = []
            for _ in range(20):
                t = time.perf_counter()
                vm.guest.shell("true")
                calls.append(time.perf_counter() - t)
        finally:
            vm.close()
    return {
        "backend": hypervisor or "qemu (started here)",
        "start_s": round(start, 2),
        "restore_p50_s": round(statistics.median(restores), 3),
        "shell_true_p50_ms": round(statistics.median(calls) * 1000, 1),
        "phases": {phase.name: round(phase.seconds, 2) for phase in vm.phases},
    }


def main(argv: list[str]) -> int:
    uris = argv or ["qemu:///system"]
    results = [measure(None)] + [measure(uri) for uri in uris]
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
