"""LAN segments: the start of a warm three-member LAN and the throughput between two
members over the segment (JSON on stdout).

    python bench/lan.py [--image debian] [--megabytes 20]

A first member boots cold once (it saves the LAN members' ready state, not timed); then
three members start on a fresh LAN (``start_seconds``: from the first ``lan.start`` to
the third member resolving the others by name). Throughput: one member's python3
listens on TCP, another sends ``--megabytes`` MB through the segment (via the host's
forwarder); ``throughput_mb_s`` is MB over the sender's wall time inside the guest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare.image.resolve import resolve_image
from pytest_adare.lan.port import LanPort
from pytest_adare.lan.segment import Lan
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions

PORT = 5001
SINK = (
    "python3 -c 'import socket; s = socket.socket(); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"\", {port})); "
    "s.listen(1); c = s.accept()[0]\n"
    "while c.recv(1 << 16): pass' >/dev/null 2>&1 &"
)
SOURCE = (
    "python3 -c 'import socket, time; c = socket.create_connection((\"sink\", {port})); "
    "b = bytes(1 << 16); t = time.monotonic()\n"
    "for _ in range({chunks}): c.sendall(b)\n"
    "c.close(); print(time.monotonic() - t)'"
)


class Members:
    """Starts and closes ``VM`` s for a :class:`Lan` (what the plugin's pool does in tests)."""

    def __init__(self, image: str) -> None:
        self.manifest = resolve_image(image, progress=None)
        self.dirs: list[Path] = []

    def start(self, name: str, ports: tuple[LanPort, ...], given: dict[str, Any]) -> VM:
        options = dataclasses.replace(VMOptions.from_given(given), lan_ports=ports)
        workdir = Path(tempfile.mkdtemp(prefix=f"adare-bench-{name}-"))
        self.dirs.append(workdir)
        vm = VM(self.manifest, workdir, options, name=name)
        try:
            return vm.start()
        except BaseException:
            vm.close()
            raise

    def close(self, vms: Any) -> None:
        for vm in vms:
            vm.close()


def new_lan(members: Members, index: int) -> Lan:
    directory = Path(tempfile.mkdtemp(prefix=f"adare-lan{index}-"))
    return Lan(f"lan{index}", "10.77.0.0/24", internet=False, directory=directory,
               index=index, starter=members.start, closer=members.close)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get("ADARE_BENCH_IMAGE", "debian"))
    parser.add_argument("--megabytes", type=int, default=20)
    args = parser.parse_args()
    members = Members(args.image)
    try:
        warmup = new_lan(members, 0)
        warmup.start("first")  # a cold boot at most: saves the members' ready state
        warmup.close()
        lan = new_lan(members, 1)
        try:
            started = time.monotonic()
            for name in ("sink", "source", "third"):
                lan.start(name)
            start_seconds = time.monotonic() - started
            lan.members["sink"].guest.succeed(SINK.format(port=PORT))
            lan.members["sink"].guest.wait_for_port(PORT, timeout=30)
            chunks = args.megabytes * 1_000_000 // (1 << 16)
            out = lan.members["source"].guest.succeed(
                SOURCE.format(port=PORT, chunks=chunks), timeout=600
            )
            seconds = float(out.strip())
        finally:
            lan.close()
    finally:
        for directory in members.dirs:
            shutil.rmtree(directory, ignore_errors=True)
    json.dump({
        "lan_start_three_warm_s": round(start_seconds, 2),
        "throughput_mb_s": round(chunks * (1 << 16) / 1e6 / seconds, 2),
        "megabytes": round(chunks * (1 << 16) / 1e6, 1),
    }, sys.stdout)  # fmt: skip
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
