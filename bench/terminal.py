"""Terminal benchmark: keystroke-to-echo latency of a guest terminal; prints one JSON object.

A terminal (the agent's ``open_terminal``, what ``adare-vm shell`` uses) runs ``cat`` on a
pty in the guest; one key at a time is sent and timed until the pty's echo of it comes
back (the guest kernel echoes it on input, so this is the agent, the transport and the
host, both ways). Over WebSocket and over the serial link, on the same image, beside the
same echo through a pty on the host (the floor: no VM, no agent).

    python bench/terminal.py [--image debian] [--keys 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pty
import select
import statistics
import time
from typing import Any

from pytest_adare import launch
from pytest_adare.agent.terminal import RemoteTerminal, TerminalTransport
from pytest_adare.loop_thread import shared_loop

KEYS = b"abcdefghijklmnopqrstuvwxyz"


def _stats_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "n": len(ordered),
    }


async def _echo_latencies(connection: TerminalTransport, keys: int) -> list[float]:
    terminal = await RemoteTerminal.open(connection, ["cat"], term="dumb")
    samples: list[float] = []
    try:
        for index in range(keys):
            key = KEYS[index % len(KEYS) : index % len(KEYS) + 1]
            started = time.perf_counter()
            await terminal.write(key)
            seen = b""
            while key not in seen:
                seen += await asyncio.wait_for(terminal.read(), 30)
            samples.append(time.perf_counter() - started)
            if index % 64 == 63:  # keep cat's line short: a newline ends it
                await terminal.write(b"\n")
                seen = b""
                while b"\n" not in seen:
                    seen += await asyncio.wait_for(terminal.read(), 30)
    finally:
        await terminal.close()
    return samples


def guest_echo(image: str, transport: str, keys: int) -> dict[str, Any]:
    started = time.monotonic()
    with launch(image, transport=transport) as vm:
        boot = time.monotonic() - started
        connection: TerminalTransport = vm.guest.aio.connection  # type: ignore[assignment]
        shared_loop().run(_echo_latencies(connection, 10), timeout=120)  # warm-up
        samples = shared_loop().run(_echo_latencies(connection, keys), timeout=600)
    return {**_stats_ms(samples), "vm_start_s": round(boot, 2)}


def host_pty_echo(keys: int) -> dict[str, Any]:
    """The same keystroke and echo through a pty on the host, with ``cat`` behind it."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("cat", ["cat"])
    samples: list[float] = []
    try:
        for index in range(keys):
            key = KEYS[index % len(KEYS) : index % len(KEYS) + 1]
            started = time.perf_counter()
            os.write(fd, key)
            seen = b""
            while key not in seen:
                select.select([fd], [], [], 10)
                seen += os.read(fd, 1024)
            samples.append(time.perf_counter() - started)
            if index % 64 == 63:
                os.write(fd, b"\n")
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    return _stats_ms(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=os.environ.get("ADARE_BENCH_IMAGE", "debian"))
    parser.add_argument("--keys", type=int, default=200, help="keystrokes timed per transport")
    args = parser.parse_args()
    result = {
        "image": args.image,
        "keystroke_echo": {
            "websocket": guest_echo(args.image, "websocket", args.keys),
            "serial": guest_echo(args.image, "serial", args.keys),
            "host_pty": host_pty_echo(args.keys),
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
