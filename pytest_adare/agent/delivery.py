"""Which channel gets our agent into a guest that was not built for it: QGA or cloud-init.

A disk without a boot-time hand-off (a user's own image) offers at most two ways in:
qemu-guest-agent (then ``install_agent`` pushes the bundle over QGA) and cloud-init
reading the NoCloud seed (then the guest starts the agent itself, see
:mod:`pytest_adare.agent.cloud_init`). :func:`await_delivery` waits for whichever
comes first. When the guest has finished booting (its serial getty prints ``login:``)
and neither came, it fails at once with :class:`AgentUnreachable` naming both missing
channels, instead of waiting out the boot timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from pytest_adare.agent.cloud_init import CLOUD_INIT_BANNER, CLOUD_INIT_DONE
from pytest_adare.errors import AdareError, AgentUnreachable

Channel = Literal["qga", "cloud-init"]

LOGIN_PROMPT = re.compile(r"login: *$", re.MULTILINE)
QGA_GRACE = 40.0
"""Seconds QGA gets after the login prompt (it starts before getty on a normal boot;
the margin is for a host so loaded that the two swap places)."""
CLOUD_INIT_GRACE = 45.0
"""Seconds the agent gets to listen after cloud-init said it finished."""
_POLL = 1.0
_CONSOLE_BYTES = 1024 * 1024

Ping = Callable[[Path, float], Awaitable[dict[str, Any]]]


def no_channel_message(seed: bool, cloud_init_seen: bool) -> str:
    """The one sentence when neither QGA nor cloud-init brought the agent."""
    if not seed:
        cloud = "no cloud-init seed was attached"
    elif cloud_init_seen:
        cloud = "cloud-init ran but did not start the agent from the cidata seed"
    else:
        cloud = "cloud-init did not run (not installed, or disabled)"
    return (
        "no way to deliver the agent: qemu-ga did not answer on the virtio-serial port "
        f"org.qemu.guest_agent.0 and {cloud}; the image needs qemu-guest-agent (enabled) "
        "or cloud-init with the NoCloud datasource, plus python3"
    )


def _console(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _CONSOLE_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


async def _no_channel(console_log: Path, seed: bool) -> None:
    """Return once the boot is over and the grace for both channels has run out."""
    deadline: float | None = None
    while deadline is None or time.monotonic() < deadline:
        await asyncio.sleep(_POLL)
        if deadline is not None:
            continue
        text = await asyncio.to_thread(_console, console_log)
        if not LOGIN_PROMPT.search(text):
            continue
        if seed and re.search(CLOUD_INIT_BANNER, text):
            if re.search(CLOUD_INIT_DONE, text):
                deadline = time.monotonic() + CLOUD_INIT_GRACE
        else:
            deadline = time.monotonic() + QGA_GRACE


OS_STARTED = re.compile(r"Linux version|\[\s*\d+\.\d+\]|systemd\[1\]|Cloud-init v\.|login:")
"""Console lines that only the guest's kernel or its userland print."""


async def _agent_listening(ping: Ping, serial_path: Path, console_log: Path) -> None:
    """Return once the agent's serial health report says it listens."""
    # Not before the kernel runs: firmware and boot loaders (OVMF, systemd-boot) read
    # every serial port as a keyboard, and a ping's bytes then press keys in their menus
    # (seen: systemd-boot toggling its default entry, then rebooting into the firmware).
    while True:
        if OS_STARTED.search(await asyncio.to_thread(_console, console_log)):
            break
        await asyncio.sleep(_POLL)
    timeout = 0.5
    while True:
        with contextlib.suppress(AdareError, OSError):
            if (await ping(serial_path, timeout)).get("listening"):
                return
        timeout = min(timeout * 1.5, 5.0)
        await asyncio.sleep(_POLL)


async def await_delivery(
    qga_sync: Callable[[], Awaitable[None]],
    *,
    seed: bool,
    console_log: Path,
    serial_path: Path | None,
    ping: Ping,
) -> Channel:
    """The first channel that works: ``qga`` (QGA answered) or ``cloud-init`` (the agent
    it started listens). The caller bounds the wait (``Machine.bounded``).

    :raise AgentUnreachable: the guest finished booting and neither came (see
        :func:`no_channel_message`).
    """
    tasks: dict[asyncio.Task[None], str] = {
        asyncio.ensure_future(qga_sync()): "qga",
        asyncio.ensure_future(_no_channel(console_log, seed)): "none",
    }
    if seed and serial_path is not None:
        listening = _agent_listening(ping, serial_path, console_log)
        tasks[asyncio.ensure_future(listening)] = "cloud-init"
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.cancelled() or task.exception() is not None:
                    continue  # a failed QGA sync: the other channels may still come
                if tasks[task] == "none":
                    seen = bool(re.search(CLOUD_INIT_BANNER, _console(console_log)))
                    raise AgentUnreachable(
                        no_channel_message(seed, seen), {"seed": seed, "cloud_init_seen": seen}
                    )
                return "qga" if tasks[task] == "qga" else "cloud-init"
        raise AgentUnreachable(no_channel_message(seed, False), {"seed": seed})
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
