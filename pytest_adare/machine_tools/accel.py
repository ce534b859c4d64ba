"""Which accelerator a guest runs under, decided once per host, QEMU and kernel.

``/dev/kvm`` opening is not enough: under some nested hypervisors ``-cpu host`` and
``-cpu max`` abort QEMU and other CPU models boot a Debian kernel into a silent stall.
So ``auto`` boots the guest's own kernel under KVM for a few seconds (no disk, no
init: the kernel either reaches its init/root-mount messages or says nothing) and
picks KVM only when it made progress. A disk booted by its firmware brings no kernel
of ours: its first boot under KVM is the probe (``AccelChoice.probed`` is False, the
machine watches for kernel progress and restarts under TCG without it, then
:func:`record_boot_probe` keeps the verdict). The verdict is cached in the user cache dir.

Example::

    choice = choose_accel("auto", probe_kernel=Path("vmlinuz"))
    print(choice.reason)   # accel: tcg (kvm: guest kernel stalled during a 6 s probe boot)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import select
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_adare.cache_dir import cache_root
from pytest_adare.machine.spec import AccelRequest as AccelRequest
from pytest_adare.machine_tools.kvm_access import kvm_unusable_reason as kvm_unusable_reason
from pytest_adare.machine_tools.reaper import spawn

# Messages a Linux kernel prints once it is well past early boot.
KERNEL_PROGRESS = re.compile(r"Run /init|Kernel panic|VFS: |Freeing unused kernel|login:")
PROBE_CPU_MODELS = ("host", "qemu64")
PROBE_SECONDS = 6.0


@dataclass(frozen=True)
class AccelChoice:
    """The accelerator, the CPU model to pass with it (or None), and a one-line why."""

    accel: Literal["kvm", "tcg"]
    cpu_model: str | None
    reason: str
    probed: bool = True
    """False: KVM is only a guess; the caller's boot must show progress (then record it)."""


def probe_kvm_boot(
    kernel: Path, qemu_binary: str, cpu_model: str, seconds: float = PROBE_SECONDS
) -> tuple[bool, str]:
    """Boot ``kernel`` under KVM with ``cpu_model`` for at most ``seconds``.

    Returns ``(progressed, what_happened)``.
    """
    argv = [
        qemu_binary, "-machine", "q35", "-accel", "kvm", "-cpu", cpu_model, "-m", "256",
        "-nodefaults", "-no-user-config", "-no-reboot", "-display", "none",
        "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1",
        "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
    ]  # fmt: skip
    proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = b""
    started = time.monotonic()
    deadline = started + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([proc.stdout], [], [], left)
            chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
            output += chunk
            text = output.decode("utf-8", errors="replace")
            if KERNEL_PROGRESS.search(text):
                return True, f"probe boot progressed in {time.monotonic() - started:.1f} s"
            if ready and not chunk:
                last = text.strip().splitlines()[-1:] or ["no output"]
                return False, f"QEMU exited with -cpu {cpu_model}: {last[0]}"
        return False, f"guest kernel stalled during a {seconds:.0f} s probe boot"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


@functools.lru_cache(maxsize=8)
def qemu_version(qemu_binary: str) -> str:
    """The first line of ``qemu_binary --version`` (part of every cache key that a QEMU
    update must invalidate)."""
    out = subprocess.run(
        [qemu_binary, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    return out.stdout.splitlines()[0] if out.stdout else f"unknown ({qemu_binary})"


def _host_key(qemu_binary: str) -> str:
    return f"{socket.gethostname()}|{os.uname().release}|{qemu_version(qemu_binary)}"


def _kernel_key(kernel: Path) -> str:
    stat = kernel.stat()
    return _kernel_digest(str(kernel.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _kernel_digest(path: str, size: int, mtime_ns: int) -> str:
    # Hashed once per process and kernel file (by size and mtime): every VM start asks
    # for the accelerator, and hashing a kernel costs ~30 ms under load.
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _ProbeCache:
    """``accel-probe.json``: host key -> kernel sha256 -> verdict."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, dict[str, object]]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def store(self, host: str, kernel: str, verdict: dict[str, object]) -> None:
        data = self.load()
        data.setdefault(host, {})[kernel] = verdict
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)


def _probe(kernel: Path, qemu_binary: str, seconds: float) -> dict[str, object]:
    why = ""
    for cpu_model in PROBE_CPU_MODELS:
        progressed, why = probe_kvm_boot(kernel, qemu_binary, cpu_model, seconds)
        if progressed:
            return {"kvm": True, "cpu_model": cpu_model, "why": f"{why} with -cpu {cpu_model}"}
    return {"kvm": False, "cpu_model": None, "why": why}


def _from_verdict(verdict: dict[str, object], cached: bool) -> AccelChoice:
    note = ", cached" if cached else ""
    if verdict.get("kvm"):
        cpu = verdict.get("cpu_model")
        return AccelChoice("kvm", str(cpu) if cpu else None, f"accel: kvm ({verdict['why']}{note})")
    return AccelChoice("tcg", None, f"accel: tcg (kvm: {verdict['why']}{note})")


BOOT_PROBE_KEY = "firmware-boot"
"""The cache entry of a verdict from a firmware-booted disk's first boot."""


def record_boot_probe(
    progressed: bool,
    why: str,
    *,
    qemu_binary: str = "qemu-system-x86_64",
    cache_path: Path | None = None,
) -> AccelChoice:
    """Keep the verdict of a boot that was the KVM probe; the choice it implies."""
    verdict: dict[str, object] = {"kvm": progressed, "cpu_model": None, "why": why}
    cache = _ProbeCache(cache_path or cache_root() / "accel-probe.json")
    cache.store(_host_key(qemu_binary), BOOT_PROBE_KEY, verdict)
    return _from_verdict(verdict, cached=False)


def choose_accel(
    requested: AccelRequest = "auto",
    *,
    probe_kernel: Path | None = None,
    qemu_binary: str = "qemu-system-x86_64",
    cache_path: Path | None = None,
    probe_seconds: float = PROBE_SECONDS,
) -> AccelChoice:
    """Decide the accelerator for ``requested`` (``auto``, ``kvm`` or ``tcg``).

    ``auto`` probes with ``probe_kernel`` (the guest's own kernel) at most once per
    host + QEMU version + kernel. Without a kernel to probe with, an earlier verdict
    for this host and QEMU is reused; with none, a usable ``/dev/kvm`` means KVM.

    :raise ValueError: for an unknown request.
    """
    if requested == "tcg":
        return AccelChoice("tcg", None, "accel: tcg (requested)")
    if requested not in ("auto", "kvm"):
        raise ValueError(f"accel must be auto, kvm or tcg, got {requested!r}")
    cache = _ProbeCache(cache_path or cache_root() / "accel-probe.json")
    host = _host_key(qemu_binary)
    known = cache.load().get(host, {})
    if requested == "kvm":
        # Take a CPU model a probe saw working; else QEMU's default (``host`` aborts
        # under some nested hypervisors, the default at worst stalls and is caught).
        models = [v["cpu_model"] for v in known.values() if v.get("kvm") and v.get("cpu_model")]
        return AccelChoice("kvm", str(models[0]) if models else None, "accel: kvm (requested)")
    unusable = kvm_unusable_reason()
    if unusable is not None:
        return AccelChoice("tcg", None, f"accel: tcg (kvm: {unusable})")
    if probe_kernel is None:
        if known:
            return _from_verdict(next(iter(known.values())), cached=True)
        return AccelChoice(
            "kvm", None, "accel: kvm (/dev/kvm usable; this first boot is the probe)", probed=False
        )
    kernel = _kernel_key(probe_kernel)
    if kernel in known:
        return _from_verdict(known[kernel], cached=True)
    verdict = _probe(probe_kernel, qemu_binary, probe_seconds)
    cache.store(host, kernel, verdict)
    return _from_verdict(verdict, cached=False)
