"""LAN segments: the start of a warm three-member LAN and the throughput between two
members over the segment (JSON on stdout).

    python bench/lan.py [--image debian] [--megabytes 20]

A first member boots cold once (it saves the LAN members' ready state, not timed); then
three members start on a fresh LAN (``start.three_warm_s``: from the first ``lan.start``
to the third member resolving the others by name), beside the floor: the three members'
own warm VM starts (``start.vm_starts_s``, the same starts without the joining). Each
member's VM start, join (address, hostname, its ``/etc/hosts``) and the others'
``/etc/hosts`` rewrite are in ``start.members``.

Throughput: one member's python3 listens on TCP, another sends ``--megabytes`` MB
through the segment (via the host's forwarder): ``throughput.segment_mb_s`` is MB over
the sender's wall time inside the guest; beside it the floor, the same bytes between
the same two python3 programs on the sender's own loopback (``loopback_mb_s``: the
guest's TCP stack and Python under the same emulation, no NIC, no forwarder).
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
    "python3 -c 'import socket, time; c = socket.create_connection((\"{host}\", {port})); "
    "b = bytes(1 << 16); t = time.monotonic()\n"
    "for _ in range({chunks}): c.sendall(b)\n"
    "c.close(); print(time.monotonic() - t)'"
)


class Members:
    """Starts and closes ``VM`` s for a :class:`Lan` (what the plugin's pool does in tests)."""

    def __init__(self, image: str) -> None:
        self.manifest = resolve_image(image, progress=None)
        self.dirs: list[Path] = []
        self.start_seconds: dict[str, float] = {}

    def start(self, name: str, ports: tuple[LanPort, ...], given: dict[str, Any]) -> VM:
        options = dataclasses.replace(VMOptions.from_given(given), lan_ports=ports)
        workdir = Path(tempfile.mkdtemp(prefix=f"adare-bench-{name}-"))
        self.dirs.append(workdir)
        vm = VM(self.manifest, workdir, options, name=name)
        started = time.monotonic()
        try:
            vm.start()
        except BaseException:
            vm.close()
            raise
        self.start_seconds[name] = time.monotonic() - started
        return vm

    def close(self, vms: Any) -> None:
        for vm in vms:
            vm.close()


def new_lan(members: Members, index: int) -> Lan:
    directory = Path(tempfile.mkdtemp(prefix=f"adare-lan{index}-"))
    return Lan(f"lan{index}", "10.77.0.0/24", internet=False, directory=directory,
               index=index, starter=members.start, closer=members.close)  # fmt: skip


class Timed:
    """Wall time of each call of a :class:`Lan` method, by member name when it takes one."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = {}

    def wrap(self, method: str) -> None:
        real = getattr(Lan, method)

        def timed(lan: Lan, *args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return real(lan, *args, **kwargs)
            finally:
                last = args[-1] if args else None
                key = last if isinstance(last, str) else str(getattr(last, "name", ""))
                self.seconds[(method, key)] = time.monotonic() - started

        setattr(Lan, method, timed)


def send(source: Any, sink: Any, host: str, megabytes: int) -> tuple[float, float]:
    """(MB sent, seconds) of one transfer from ``source`` to ``sink``'s TCP port."""
    sink.guest.succeed(SINK.format(port=PORT))
    sink.guest.wait_for_port(PORT, timeout=30)
    chunks = megabytes * 1_000_000 // (1 << 16)
    out = source.guest.succeed(SOURCE.format(host=host, port=PORT, chunks=chunks), timeout=600)
    return chunks * (1 << 16) / 1e6, float(out.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get("ADARE_BENCH_IMAGE", "debian"))
    parser.add_argument("--megabytes", type=int, default=20)
    args = parser.parse_args()
    members = Members(args.image)
    timed = Timed()
    try:
        warmup = new_lan(members, 0)
        warmup.start("first")  # a cold boot at most: saves the members' ready state
        warmup.close()
        members.start_seconds.clear()
        for method in ("_configure", "_publish_hosts"):
            timed.wrap(method)
        names = ("sink", "source", "third")
        lan = new_lan(members, 1)
        try:
            started = time.monotonic()
            for name in names:
                lan.start(name)
            start_seconds = time.monotonic() - started
            source, sink = lan.members["source"], lan.members["sink"]
            accel = source.machine.accel
            megabytes, segment_s = send(source, sink, "sink", args.megabytes)
            _, loopback_s = send(source, source, "127.0.0.1", args.megabytes)
        finally:
            lan.close()
    finally:
        for directory in members.dirs:
            shutil.rmtree(directory, ignore_errors=True)
    json.dump({
        "accel": accel,
        "start": {
            "three_warm_s": round(start_seconds, 2),
            "vm_starts_s": round(sum(members.start_seconds.values()), 2),
            "members": {name: {
                "vm_start_s": round(members.start_seconds[name], 3),
                "join_s": round(timed.seconds[("_configure", name)], 3),
                "others_hosts_s": round(timed.seconds.get(("_publish_hosts", name), 0.0), 3),
            } for name in names},
        },
        "throughput": {
            "megabytes": round(megabytes, 1),
            "segment_mb_s": round(megabytes / segment_s, 2),
            "loopback_mb_s": round(megabytes / loopback_s, 2),
        },
    }, sys.stdout)  # fmt: skip
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
