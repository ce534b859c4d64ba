"""Forwarded-port throughput: 64 MiB from the host into the guest through a forward
(``ports=``), beside the agent's 64 MiB pull in the same VM (JSON on stdout).

    python bench/port_forward.py [IMAGE]        # IMAGE: manifest, directory or built-in name

The guest's receiver (python3) reads until it has every byte and then answers ``ok``: the
time is from the host's first byte to that answer. Forward and pull alternate, three
each, so a load swing on a shared host hits both alike; medians are reported.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_adare import launch
from pytest_adare.host_access import parse_ports
from pytest_adare.image.resolve import resolve_image

SIZE = 64 * 1024 * 1024
PORT = 9100
ROUNDS = 3
RECEIVER = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen()
while True:
    c, _ = s.accept()
    n = 0
    while n < {SIZE}:
        d = c.recv(1 << 20)
        if not d:
            break
        n += len(d)
    if n >= {SIZE}:
        c.sendall(b"ok")
    c.close()
"""


def send_through(address: tuple[str, int], payload: bytes) -> float:
    """Seconds from the first byte sent to the guest's ``ok``."""
    with socket.create_connection(address, timeout=600) as sock:
        started = time.perf_counter()
        sock.sendall(payload)
        answer = sock.recv(2)
        elapsed = time.perf_counter() - started
    if answer != b"ok":
        raise RuntimeError(f"the guest's receiver answered {answer!r}")
    return elapsed


def main(image: str) -> dict[str, Any]:
    manifest = resolve_image(image)
    payload = bytes(range(256)) * (SIZE // 256)
    with tempfile.TemporaryDirectory() as scratch, launch(
        manifest.path or manifest.disk, workdir=Path(scratch) / "vm", progress=None,
        ports=parse_ports([PORT]),
    ) as vm:  # fmt: skip
        guest = vm.guest
        guest.succeed(f"cat > /tmp/recv.py <<'EOF'\n{RECEIVER}\nEOF")
        guest.shell("exec python3 /tmp/recv.py", background=True).check()
        guest.wait_for_port(PORT, timeout=300, from_host=True)
        guest.succeed(f"head -c {SIZE} /dev/urandom > /tmp/bench-64m")
        forward: list[float] = []
        pull: list[float] = []
        for n in range(ROUNDS):
            forward.append(send_through(guest.port(PORT), payload))
            t = time.perf_counter()
            guest.pull("/tmp/bench-64m", Path(scratch) / f"pulled-{n}")
            pull.append(time.perf_counter() - t)
        accel = vm.machine.accel
    return {
        "image": image,
        "accel": accel,
        "forward_host_to_guest_64mib_mb_per_s": round(SIZE / statistics.median(forward) / 1e6, 1),
        "agent_pull_64mib_mb_per_s": round(SIZE / statistics.median(pull) / 1e6, 1),
        "forward_seconds": [round(s, 3) for s in forward],
        "pull_seconds": [round(s, 3) for s in pull],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "debian"), indent=2))
