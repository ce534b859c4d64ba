"""The agent's serial link (network off) on virtio-serial beside the 16550 UART, one run.

Boots the image twice with ``transport="serial", network=False``: once as it is (the
built-in images carry the link on a virtio-serial port), once from a copy of its
manifest whose ``agent.serial_device`` is ``/dev/ttyS1`` (the link on the emulated
UART, the fallback for guests without virtio drivers). Each time: the ``get_timestamp``
round trip (p50 of 20), a push and a pull of random bytes (sha256-checked by the
transfer itself), in MiB/s. The UART moves less data (it is two orders slower).

Run: ``python bench/serial_link.py [--image debian] [--mib 8] [--uart-kib 256]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_adare import launch
from pytest_adare.image.manifest import write_manifest
from pytest_adare.image.resolve import resolve_image


def measure(image: Path, size: int, workdir: Path) -> dict[str, Any]:
    source = workdir / "payload"
    source.write_bytes(os.urandom(size))
    with launch(image, transport="serial", network=False, workdir=workdir / "vm",
                progress=None) as vm:  # fmt: skip
        guest = vm.guest
        samples = []
        for _ in range(20):
            t = time.perf_counter()
            guest.call("get_timestamp")
            samples.append(time.perf_counter() - t)
        t = time.perf_counter()
        guest.push(source, "/tmp/bench-serial")
        push_s = time.perf_counter() - t
        t = time.perf_counter()
        pulled = guest.pull("/tmp/bench-serial", workdir / "pulled")
        pull_s = time.perf_counter() - t
        assert pulled.read_bytes() == source.read_bytes()
        qemu_line = next((p.detail for p in vm.phases if p.name == "qemu"), "")
    mib = size / 2**20
    return {
        "bytes": size,
        "push_mib_s": round(mib / push_s, 3),
        "pull_mib_s": round(mib / pull_s, 3),
        "get_timestamp_p50_ms": round(statistics.median(samples) * 1000, 2),
        "qemu_phase": qemu_line,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--image", default="debian")
    parser.add_argument("--mib", type=int, default=8, help="bytes moved over virtio-serial")
    parser.add_argument("--uart-kib", type=int, default=256, help="bytes moved over the UART")
    args = parser.parse_args()
    manifest = resolve_image(args.image)
    assert manifest.path is not None, "needs an image with a manifest"
    with tempfile.TemporaryDirectory(prefix="adare-bench-serial-") as tmp:
        root = Path(tmp)
        uart_manifest = write_manifest(
            replace(manifest, agent=replace(manifest.agent, serial_device="/dev/ttyS1")),
            root / "uart.json",
        )
        (root / "virtio").mkdir()
        (root / "uart").mkdir()
        virtio = measure(manifest.path, args.mib * 2**20, root / "virtio")
        uart = measure(uart_manifest, args.uart_kib * 2**10, root / "uart")
    print(json.dumps({"benchmark": "serial_link", "virtio_serial": virtio, "uart": uart}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
