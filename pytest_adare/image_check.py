"""``adare-image check``: boot an image and time each phase up to a working agent.

Phases, each timed from the moment QEMU was started: ``qemu`` (QMP up), ``console``
(first byte on ttyS0), ``init`` (the adare init's "system ready" marker, built-in
images only), ``qga`` (``guest-sync`` answered), ``agent`` (WebSocket ``connect``
answered with the expected bundle hash). The boot-time hand-off is checked too:
the ``config.json`` read back over QGA must be the one given through fw_cfg.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from adare_guest.tool_names import GET_STATUS
from pytest_adare.agent.install import (
    FW_CFG_CONFIG,
    GuestLayout,
    agent_config,
    boot_handoff,
    new_token,
)
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import (
    AdareError,
    AgentUnreachable,
    ImageError,
    VMTimeout,
    format_tail,
)
from pytest_adare.image.agent_bundle import build_agent_bundle
from pytest_adare.image.initrd import handoff_initrd
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.image.resolve import resolve_image
from pytest_adare.loop_thread import shared_loop
from pytest_adare.machine.base import MachineBackend
from pytest_adare.machine.registry import backend_named
from pytest_adare.machine.spec import AccelRequest, MachineSpec
from pytest_adare.machine_tools.qga import AsyncQGAClient
from pytest_adare.vm_options import VMOptions

Progress = Callable[[str], None]
INIT_READY = r"adare-init: system ready"


@dataclass
class CheckReport:
    """What ``check`` saw: per-phase seconds since QEMU start, and the first failure."""

    image: str
    accel: str | None = None
    accel_reason: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    handoff: str | None = None

    @property
    def ok(self) -> bool:
        """True when every phase passed."""
        return self.failure is None


class _Clock:
    def __init__(self, report: CheckReport, progress: Progress) -> None:
        self.report = report
        self.progress = progress
        self.start = time.monotonic()

    def mark(self, phase: str, detail: str = "") -> None:
        seconds = round(time.monotonic() - self.start, 2)
        self.report.phases[phase] = seconds
        self.progress(f"[{seconds:6.2f}s] {phase:<8} ok{'  ' + detail if detail else ''}")


async def _wait_qga(path: Path, timeout: float) -> None:
    qga = AsyncQGAClient(path)
    try:
        await qga.sync(timeout=timeout)
        await qga.ping()
    finally:
        await qga.close()


async def _read_guest_file(path: Path, guest_path: str, timeout: float) -> bytes:
    qga = AsyncQGAClient(path)
    try:
        await qga.sync(timeout=timeout)
        return await qga.file_read(guest_path, timeout=timeout)
    finally:
        await qga.close()


async def _wait_agent(vm: MachineBackend, token: str, timeout: float) -> dict[str, Any]:
    """Connect until the agent answers; returns its ``connect`` answer."""
    assert vm.agent_port is not None
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = await AgentClient.connect(
                "127.0.0.1", vm.agent_port, token, attempts=1, attempt_timeout=5.0
            )
        except AgentUnreachable as exc:
            vm.check_alive()
            if time.monotonic() >= deadline:
                raise VMTimeout(
                    f"the agent to answer on port {vm.agent_port} ({exc})",
                    timeout,
                    vm.console_tail(30),
                ) from exc
            await asyncio.sleep(0.2)
            continue
        try:
            await client.call(GET_STATUS, {}, timeout=30)
            return client.server_info
        finally:
            await client.close()


def _expected_hash(manifest: ImageManifest, handed_over: bool, host_hash: str) -> str | None:
    return host_hash if handed_over else manifest.agent.bundle_hash


def _run_phases(
    manifest: ImageManifest,
    vm: MachineBackend,
    token: str,
    config_file: Path,
    expected_hash: str | None,
    clock: _Clock,
    timeout: float,
) -> None:
    loop = shared_loop()
    vm.start()
    clock.report.accel, clock.report.accel_reason = vm.accel, vm.accel_reason
    clock.mark("qemu", vm.accel_reason or "")
    loop.run(vm.await_for_console(r"\S", timeout))
    clock.mark("console")
    if manifest.agent.baked:
        loop.run(vm.await_for_console(INIT_READY, timeout))
        clock.mark("init")
    loop.run(_wait_qga(vm.qga_path, timeout), timeout + 10)
    clock.mark("qga")
    if not manifest.agent.baked:
        clock.progress("agent: not baked into this image (installed over QGA at run time)")
        return
    info = loop.run(_wait_agent(vm, token, timeout), timeout + 10)
    clock.report.agent = {k: info.get(k) for k in ("version", "bundle_hash", "platform")}
    got = info.get("bundle_hash")
    if expected_hash is not None and got != expected_hash:
        raise AdareError(f"the agent runs bundle {got}, expected {expected_hash}")
    clock.mark("agent", f"version {info.get('version')}, bundle {str(got)[:12]}")
    handed = loop.run(
        _read_guest_file(vm.qga_path, f"{manifest.agent.run_dir}/config.json", timeout),
        timeout + 10,
    )
    if json.loads(handed) != json.loads(config_file.read_text()):
        raise AdareError("the guest's config.json differs from the one handed over")
    clock.mark("handoff", "config.json handed over intact")


def _handoff_route(manifest: ImageManifest, handoff: str) -> str:
    if handoff == "auto":
        return "initrd" if manifest.agent.initrd_handoff else "fw_cfg"
    if handoff == "initrd" and not manifest.agent.initrd_handoff:
        raise ImageError(f"image {manifest.name} does not take an initrd hand-off")
    return handoff


def check_image(
    spec: str,
    *,
    accel: AccelRequest = "auto",
    timeout: float = 120.0,
    progress: Progress = print,
    workdir: Path | None = None,
    handoff: str = "auto",
) -> CheckReport:
    """Boot the image ``spec`` once and report how long each phase took.

    ``handoff`` is how per-VM files reach a built-in image: ``fw_cfg``, ``initrd``
    (appended to the image's initrd, much faster for a changed agent bundle) or
    ``auto`` (initrd where the image supports it).
    Never raises for a failing guest: the report's ``failure`` holds the cause and the
    console tail (also printed).
    """
    manifest = resolve_image(spec, progress=progress)
    route = _handoff_route(manifest, handoff)
    report = CheckReport(image=str(manifest.path or manifest.disk))
    with tempfile.TemporaryDirectory(prefix="adare-check-") as tmp:
        base = workdir or Path(tmp)
        token = new_token()
        config = agent_config(GuestLayout.for_manifest(manifest), token)
        bundle = build_agent_bundle(gui=manifest.desktop)
        fw_cfg, handed_over = boot_handoff(manifest, base / "handoff", config, bundle)
        config_file = fw_cfg[FW_CFG_CONFIG]
        booted = manifest
        if route == "initrd" and manifest.initrd is not None:
            files = {"config.json": config_file}
            if handed_over:
                files["bundle.pyz"] = bundle.path
            booted = replace(
                manifest,
                initrd=handoff_initrd(manifest.initrd, files, base / "handoff" / "initrd.gz"),
            )
            fw_cfg = {}
        elif not manifest.agent.fw_cfg:
            fw_cfg = {}
        how = f"handed over by {route}" if handed_over else "baked in"
        progress(f"checking {report.image} (agent bundle {how})")
        report.handoff = route
        machine_spec = MachineSpec(accel=accel, fw_cfg=fw_cfg, name="adare-check")
        # the image is checked on QEMU started here, whatever --adare-backend says
        factory = backend_named("qemu").machine_factory(VMOptions(), None)
        vm = factory(booted, base / "vm", machine_spec)
        clock = _Clock(report, progress)
        try:
            _run_phases(
                manifest,
                vm,
                token,
                config_file,
                _expected_hash(manifest, handed_over, bundle.bundle_hash),
                clock,
                timeout,
            )
        except AdareError as exc:
            tail = format_tail(vm.console_tail(30))
            report.failure = str(exc) if "console lines" in str(exc) else f"{exc}\n{tail}"
            progress(f"FAILED: {report.failure}")
        finally:
            vm.kill()
    return report
