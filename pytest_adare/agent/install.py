"""Getting our agent running in a guest: over QGA, or handed over at boot (initrd/fw_cfg).

Two paths (DESIGN §5, docs/runtime.md):

* **Boot-time hand-off** (built-in images: manifest ``agent.baked`` and ``agent.fw_cfg``
  or ``agent.initrd_handoff``): :func:`prepare_boot_handoff` gives the per-VM
  ``config.json`` (and the host's bundle when its hash differs from the baked one)
  to the guest, appended to the image's initrd where the image takes that (loaded
  by DMA: fast), else as ``-fw_cfg`` files (:func:`boot_handoff`); the guest's init
  starts the agent. No QGA round trip at all. The initrd with the bundle is cached
  (same for every VM); only the small ``config.json`` archive is per VM.
* **Install over QGA** (any Linux/Windows guest with ``qemu-ga`` and Python 3):
  :func:`install_agent` opens the firewall port (:mod:`adare_guest.firewall`), asks
  the installed agent (if any) for
  its identity and skips the upload when it equals ours, else writes the bundle with
  QGA file writes; then writes ``config.json`` with the token and starts the agent:
  as a transient systemd unit (``systemd-run``: restarted on failure, logs in the
  journal, outside qemu-ga's cgroup) where systemd is PID 1, else detached with
  ``nohup setsid``. Before anything it checks the guest's python3 against
  :data:`PYTHON_FLOOR`.
"""

from __future__ import annotations

import hashlib
import json
import ntpath
import os
import posixpath
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from adare_guest.config import DEFAULT_PORT
from pytest_adare.cache_dir import cache_root
from pytest_adare.errors import ImageError, QGAError
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.image.initrd import handoff_initrd
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine_tools.qga import AsyncQGAClient

AGENT_PORT = DEFAULT_PORT
FW_CFG_CONFIG = "opt/adare/config.json"
FW_CFG_BUNDLE = "opt/adare/bundle.pyz"
IDENTITY_SCRIPT = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from adare_guest.identity import agent_identity; print(json.dumps(agent_identity()))"
)


PYTHON_FLOOR = (3, 9)
"""The oldest guest Python the agent bundle runs on: Debian 11, RHEL 9, Ubuntu 22.04 and
later (the host itself needs 3.10, the project's ``requires-python``). Proven under
Debian 11's real Python 3.9 by tests/integration/test_python39_guest.py."""
PYTHON_VERSION_SCRIPT = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
TRANSIENT_UNIT = "adare-agent-qga"
FIREWALL_SCRIPT = resources.files("adare_guest").joinpath("firewall.py").read_text("utf-8")
"""The guest-side firewall step (:mod:`adare_guest.firewall`), run as ``python3 -c``."""
"""The ``systemd-run`` unit of an agent installed over QGA."""


STOP_SCRIPT = (
    "import os, signal, sys\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try: cmd = open('/proc/%s/cmdline' % p, 'rb').read().split(b'\\0')\n"
    "    except OSError: continue\n"
    "    if int(p) != os.getpid() and sys.argv[1].encode() in cmd[1:]:\n"
    "        os.kill(int(p), signal.SIGTERM)\n"
)


def new_token() -> str:
    """A fresh per-VM bearer token."""
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class GuestLayout:
    """Where the agent lives in the guest: ``<root>/agent/bundle.pyz``, ``<root>/run/``."""

    os: str
    run_dir: str
    serial_device: str | None

    @classmethod
    def for_manifest(cls, manifest: ImageManifest) -> GuestLayout:
        """The layout the image's manifest names (run dir, serial device)."""
        run_dir = manifest.agent.run_dir
        if manifest.os == "windows" and run_dir == "/adare/run":
            run_dir = r"C:\adare\run"
        return cls(manifest.os, run_dir, manifest.agent.serial_device)

    def _join(self, *parts: str) -> str:
        if self.os == "windows":
            return ntpath.join(*parts)
        return posixpath.join(*parts)

    @property
    def agent_dir(self) -> str:
        """Sibling of the run dir: ``/adare/agent`` for ``/adare/run``."""
        parent = (
            ntpath.dirname(self.run_dir)
            if self.os == "windows"
            else posixpath.dirname(self.run_dir)
        )
        return self._join(parent, "agent")

    @property
    def bundle_path(self) -> str:
        return self._join(self.agent_dir, "bundle.pyz")

    @property
    def config_path(self) -> str:
        return self._join(self.run_dir, "config.json")

    @property
    def log_path(self) -> str:
        """The agent's log file (``logfile`` in config.json)."""
        return self._join(self.run_dir, "agent.log")

    @property
    def output_path(self) -> str:
        """Where the agent's stdout/stderr go (a crash before logging starts lands here)."""
        return self._join(self.run_dir, "agent.out")

    @property
    def python(self) -> str:
        return "python" if self.os == "windows" else "python3"


AGENT_LOG_LEVEL = "INFO"
"""The log level every VM's agent runs at (its log tail is failure evidence): one line
per finished call (``bench/agent.py`` measures the agent at this level too)."""


def agent_config(
    layout: GuestLayout, token: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's ``config.json`` for one VM (``overrides`` win, e.g. ``host``)."""
    config: dict[str, Any] = {
        "host": "0.0.0.0",
        "port": AGENT_PORT,
        "token": token,
        "logfile": layout.log_path,
        "log_level": AGENT_LOG_LEVEL,
    }
    if layout.serial_device:
        config["serial_device"] = layout.serial_device
    config.update(overrides or {})
    return config


def uses_boot_handoff(manifest: ImageManifest) -> bool:
    """True for images whose init starts the baked agent with handed-over settings."""
    return manifest.agent.baked and (manifest.agent.fw_cfg or uses_initrd_handoff(manifest))


def uses_initrd_handoff(manifest: ImageManifest) -> bool:
    """True for images whose initrd takes the hand-off files (``agent.initrd_handoff``)."""
    return manifest.agent.initrd_handoff and manifest.initrd is not None


@dataclass(frozen=True)
class BootHandoff:
    """How per-VM files reach a built-in image: ``route`` is ``initrd`` or ``fw_cfg``.

    Boot with ``initrd`` (when set) in place of the image's and ``fw_cfg`` as
    ``-fw_cfg`` files. ``replaced``: the host's bundle goes along (its hash differs
    from the baked one).
    """

    route: str
    fw_cfg: dict[str, Path]
    initrd: Path | None
    replaced: bool

    def describe(self) -> str:
        """``config + newer bundle via initrd`` and the like."""
        what = "config + newer bundle" if self.replaced else "config"
        return f"{what} via {self.route}"


def prepare_boot_handoff(
    manifest: ImageManifest, workdir: Path, config: Mapping[str, Any], bundle: AgentBundle
) -> BootHandoff:
    """The hand-off for a built-in image: by initrd where the image takes it, else fw_cfg.

    The initrd holding the bundle is built once per (image initrd, bundle) under
    ``$XDG_CACHE_HOME/pytest-adare/handoff/``; each VM appends its own ``config.json``
    archive to it (``workdir/handoff-initrd.gz``).
    """
    entries, replaced = boot_handoff(manifest, workdir, config, bundle)
    if not uses_initrd_handoff(manifest):
        return BootHandoff("fw_cfg", entries, None, replaced)
    assert manifest.initrd is not None
    base = bundle_initrd(manifest.initrd, bundle) if replaced else manifest.initrd
    initrd = handoff_initrd(
        base, {"config.json": entries[FW_CFG_CONFIG]}, workdir / "handoff-initrd.gz"
    )
    return BootHandoff("initrd", {}, initrd, replaced)


def bundle_initrd(base: Path, bundle: AgentBundle) -> Path:
    """``base`` with ``bundle`` appended as ``/handoff/bundle.pyz`` (cached by content)."""
    base_digest = hashlib.sha256(base.read_bytes()).hexdigest()
    directory = cache_root() / "handoff"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"initrd-{base_digest[:16]}-bundle-{bundle.sha256[:16]}.gz"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".part")
        os.close(fd)
        try:
            handoff_initrd(base, {"bundle.pyz": bundle.path}, Path(tmp))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


def boot_handoff(
    manifest: ImageManifest, workdir: Path, config: Mapping[str, Any], bundle: AgentBundle
) -> tuple[dict[str, Path], bool]:
    """The ``-fw_cfg`` files for a built-in image, and whether the bundle is among them.

    The bundle goes along only when its hash differs from the one baked in the image.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "agent-config.json"
    config_file.write_text(json.dumps(dict(config), indent=1))
    entries = {FW_CFG_CONFIG: config_file}
    replaced = manifest.agent.bundle_hash != bundle.bundle_hash
    if replaced:
        entries[FW_CFG_BUNDLE] = bundle.path
    return entries, replaced


@dataclass(frozen=True)
class InstallReport:
    """What :func:`install_agent` did: ``action`` is ``skipped`` or ``installed``."""

    action: str
    firewall: str
    installed_identity: dict[str, Any] | None
    seconds: float

    def describe(self) -> str:
        """One line for the progress output."""
        found = self.installed_identity
        had = (
            f"found {found.get('version')} {str(found.get('bundle_hash'))[:12]}"
            if found
            else "none found"
        )
        return f"{self.action} ({had}; firewall: {self.firewall})"


async def qga_run(
    qga: AsyncQGAClient, argv: Sequence[str], timeout: float = 60.0
) -> tuple[int, str, str]:
    """Run ``argv`` in the guest over QGA: (exit code, stdout, stderr) as text."""
    result = await qga.exec(argv, timeout=timeout)
    return (
        result.exitcode,
        result.stdout.decode("utf-8", "replace"),
        result.stderr.decode("utf-8", "replace"),
    )


async def open_firewall(qga: AsyncQGAClient, layout: GuestLayout) -> str:
    """Open the agent's port in the guest's firewalls (in memory only: firewalld's runtime
    rule, nftables, iptables/ufw; see :mod:`adare_guest.firewall`); says what it did."""
    if layout.os == "windows":
        rule = (
            "New-NetFirewallRule -DisplayName 'adare agent' -Direction Inbound "
            f"-Protocol TCP -LocalPort {AGENT_PORT} -Action Allow | Out-Null"
        )
        code, _, err = await qga_run(qga, ["powershell", "-NoProfile", "-Command", rule])
        return "rule added" if code == 0 else f"New-NetFirewallRule failed: {err.strip()[:200]}"
    code, out, err = await qga_run(qga, [layout.python, "-c", FIREWALL_SCRIPT, str(AGENT_PORT)])
    return describe_firewall(code, out, err)


def describe_firewall(code: int, out: str, err: str) -> str:
    """One line from the firewall script's exit code and output (guest data: bounded,
    and a report that is not the script's JSON is said to be one)."""
    if code != 0:
        return f"firewall step failed ({code}): {(err or out).strip()[-200:]}"
    lines = out.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
        actions = report["actions"] if isinstance(report, dict) else None
    except (ValueError, KeyError):
        actions = None
    if not isinstance(actions, list):
        return f"firewall step gave no report: {out.strip()[:200]!r}"
    if not actions:
        return "none active"
    return "; ".join(str(action)[:200] for action in actions[:8])


async def installed_identity(qga: AsyncQGAClient, layout: GuestLayout) -> dict[str, Any] | None:
    """The identity of the agent bundle already in the guest, or None when there is none."""
    code, out, _ = await qga_run(qga, [layout.python, "-c", IDENTITY_SCRIPT, layout.bundle_path])
    if code != 0:
        return None
    try:
        found = json.loads(out)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


async def check_python(qga: AsyncQGAClient, layout: GuestLayout) -> str:
    """The guest's python3 version (``3.11.2``).

    :raise ImageError: in one line: no python3, or one older than :data:`PYTHON_FLOOR`.
    """
    floor = ".".join(map(str, PYTHON_FLOOR))
    need = f"the agent needs Python >= {floor} in the image"
    try:
        code, out, err = await qga_run(qga, [layout.python, "-c", PYTHON_VERSION_SCRIPT])
    except QGAError as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ImageError(f"the guest has no {layout.python} ({why}); {need}") from exc
    version = out.strip()
    parts = version.split(".")
    if code != 0 or len(parts) != 3 or not all(p.isdigit() for p in parts):
        detail = (err or out).strip().splitlines()[:1] or [f"exit code {code}"]
        raise ImageError(f"the guest's {layout.python} does not run ({detail[0][:200]}); {need}")
    if (int(parts[0]), int(parts[1])) < PYTHON_FLOOR:
        raise ImageError(f"the guest's {layout.python} is {version}; {need}")
    return version


async def stop_agent(qga: AsyncQGAClient, layout: GuestLayout) -> None:
    """Stop agents started from our bundle path (a re-install replaces them)."""
    if layout.os == "windows":
        return  # started fresh each boot; a running one keeps its port (documented)
    await qga_run(qga, [layout.python, "-c", STOP_SCRIPT, layout.bundle_path])


async def start_agent(qga: AsyncQGAClient, layout: GuestLayout) -> None:
    """Start the agent detached (it outlives the ``guest-exec`` that started it)."""
    if layout.os == "windows":
        command = (
            f"Start-Process -WindowStyle Hidden -FilePath {layout.python} "
            f"-ArgumentList '{layout.bundle_path}','{layout.run_dir}' "
            f"-RedirectStandardOutput '{layout.output_path}'"
        )
        await qga.spawn(["powershell", "-NoProfile", "-Command", command])
        return
    run = f"{layout.python} '{layout.bundle_path}' '{layout.run_dir}'"
    unit = TRANSIENT_UNIT
    command = (
        f"cd '{layout.run_dir}' || exit 1; "
        "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then "
        f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; "
        f"exec systemd-run --quiet --unit={unit} --collect -p Restart=on-failure "
        f"-p WorkingDirectory='{layout.run_dir}' {run}; "
        f"else nohup setsid {run} > '{layout.output_path}' 2>&1 < /dev/null & fi"
    )
    code, _, err = await qga_run(qga, ["/bin/sh", "-c", command])
    if code != 0:
        raise QGAError(f"could not start the agent in the guest: {err.strip()[:300]}")


async def _make_dirs(qga: AsyncQGAClient, layout: GuestLayout) -> None:
    if layout.os == "windows":
        command = f"New-Item -ItemType Directory -Force '{layout.agent_dir}','{layout.run_dir}'"
        argv = ["powershell", "-NoProfile", "-Command", command]
    else:
        argv = ["mkdir", "-p", layout.agent_dir, layout.run_dir]
    code, _, err = await qga_run(qga, argv)
    if code != 0:
        raise QGAError(f"could not create {layout.agent_dir} in the guest: {err.strip()[:300]}")


async def _replace_file(qga: AsyncQGAClient, layout: GuestLayout, source: str, target: str) -> None:
    if layout.os == "windows":
        command = f"Move-Item -Force '{source}' '{target}'"
        argv = ["powershell", "-NoProfile", "-Command", command]
    else:
        argv = ["mv", "-f", source, target]
    code, _, err = await qga_run(qga, argv)
    if code != 0:
        raise QGAError(f"could not move {source} to {target} in the guest: {err.strip()[:300]}")


async def install_agent(
    qga: AsyncQGAClient,
    layout: GuestLayout,
    bundle: AgentBundle,
    config: Mapping[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> InstallReport:
    """The install lifecycle over QGA (QGA must already answer: see ``AsyncQGAClient.sync``).

    :raise QGAError: a QGA step failed (the message names it).
    """
    started = time.monotonic()
    if layout.os != "windows":
        await check_python(qga, layout)
    firewall = await open_firewall(qga, layout)
    found = await installed_identity(qga, layout)
    same = (
        found is not None
        and found.get("bundle_hash") == bundle.bundle_hash
        and found.get("version") == bundle.version
    )
    await _make_dirs(qga, layout)
    await stop_agent(qga, layout)
    if not same:
        if progress is not None:
            size = bundle.path.stat().st_size
            progress(f"install: pushing the agent bundle ({size / 1024:.0f} KiB) over QGA")
        data = bundle.path.read_bytes()
        await qga.file_write(layout.bundle_path + ".part", data)
        await _replace_file(qga, layout, layout.bundle_path + ".part", layout.bundle_path)
    await qga.file_write(layout.config_path, json.dumps(dict(config), indent=1).encode())
    await start_agent(qga, layout)
    return InstallReport(
        "skipped" if same else "installed", firewall, found, time.monotonic() - started
    )
