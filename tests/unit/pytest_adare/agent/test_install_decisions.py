"""What the agent install decides, over a fake QGA that plays a guest.

``install_agent`` asks the guest which agent bundle it has and pushes ours only when it
differs; the firewall step runs its real script (:mod:`adare_guest.firewall`) in a
sandbox whose PATH holds only what the fake guest has (real nftables and iptables:
tests/integration/test_guest_firewall.py); ``uses_boot_handoff``/``uses_initrd_handoff`` choose the
route from the manifest alone.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.agent.install import (
    AGENT_PORT,
    FIREWALL_SCRIPT,
    IDENTITY_SCRIPT,
    PYTHON_VERSION_SCRIPT,
    STOP_SCRIPT,
    GuestLayout,
    describe_firewall,
    install_agent,
    uses_boot_handoff,
    uses_initrd_handoff,
)
from pytest_adare.errors import ImageError, QGAError
from pytest_adare.image.agent_bundle import AgentBundle
from pytest_adare.image.manifest import AgentSpec, ImageManifest
from pytest_adare.machine_tools.qga import QGAExecResult

LINUX = GuestLayout("linux", "/adare/run", "/dev/ttyS1")
WINDOWS = GuestLayout("windows", r"C:\adare\run", None)


@dataclass
class FakeQGA:
    """The ``AsyncQGAClient`` methods ``install_agent`` calls, answered like a guest would.

    ``identity``: what the installed bundle's identity script prints (``None``: no bundle,
    the script fails). ``firewall_cmd``: the guest's ``firewall-cmd`` as a shell script
    body, or ``None`` when the guest has none. The firewall probe runs for real in
    ``/bin/sh`` with PATH = ``sandbox`` (only what the guest has); every call is recorded.
    """

    sandbox: Path
    identity: str | None = None
    firewall_cmd: str | None = None
    failing: set[str] = field(default_factory=set)
    python: str | None = "3.11.2"
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sandbox.mkdir(parents=True, exist_ok=True)
        if self.firewall_cmd is not None:
            tool = self.sandbox / "firewall-cmd"
            tool.write_text(f'#!/bin/sh\necho "$@" >> "{self.sandbox}/firewall-cmd.args"\n'
                            f"{self.firewall_cmd}\n")  # fmt: skip
            tool.chmod(0o755)

    @property
    def firewall_args(self) -> list[str]:
        log = self.sandbox / "firewall-cmd.args"
        return log.read_text().splitlines() if log.exists() else []

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input_data: bytes | None = None,
        env: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> QGAExecResult:
        self.calls.append(("exec", list(argv)))
        if argv[0] in self.failing:
            return QGAExecResult(1, b"", f"{argv[0]}: Permission denied".encode())
        if list(argv[1:3]) == ["-c", PYTHON_VERSION_SCRIPT]:
            if self.python is None:
                raise QGAError("guest-exec: Failed to execute child process “python3”")
            return QGAExecResult(0, f"{self.python}\n".encode(), b"")
        if list(argv[1:3]) == ["-c", IDENTITY_SCRIPT]:
            if self.identity is None:
                return QGAExecResult(2, b"", b"can't open file 'bundle.pyz'")
            return QGAExecResult(0, self.identity.encode(), b"")
        if list(argv[1:3]) == ["-c", FIREWALL_SCRIPT]:
            done = await asyncio.to_thread(
                subprocess.run, [sys.executable, *argv[1:]], capture_output=True,
                env={"PATH": str(self.sandbox)}, timeout=timeout,
            )  # fmt: skip
            return QGAExecResult(done.returncode, done.stdout, done.stderr)
        return QGAExecResult(0, b"", b"")

    async def spawn(
        self, argv: Sequence[str], env: Sequence[str] = (), timeout: float = 30.0
    ) -> int:
        self.calls.append(("spawn", list(argv)))
        return 4242

    async def file_write(
        self, guest_path: str, data: bytes, *, mode: str = "wb", timeout: float = 120.0
    ) -> None:
        self.calls.append(("write", guest_path))

    def steps(self) -> list[str]:
        """The calls as short step names, in order."""
        return [_step(kind, what) for kind, what in self.calls]


def _step(kind: str, what: Any) -> str:
    if kind == "write":
        return f"write {what}"
    argv = list(what)
    if argv[1:3] == ["-c", IDENTITY_SCRIPT]:
        return "identity"
    if argv[1:3] == ["-c", STOP_SCRIPT]:
        return "stop"
    if argv[1:3] == ["-c", PYTHON_VERSION_SCRIPT]:
        return "python"
    if argv[1:3] == ["-c", FIREWALL_SCRIPT]:
        return "firewall"
    if argv[0] in ("mkdir", "mv"):
        return argv[0]
    script = " ".join(argv[1:])
    if "nohup" in script or "Start-Process" in script:
        return "start"
    if "firewall" in script.lower() or "FirewallRule" in script:
        return "firewall"
    if "New-Item" in script:
        return "mkdir"
    if "Move-Item" in script:
        return "mv"
    return f"{kind} {argv}"


@pytest.fixture
def bundle(tmp_path: Path) -> AgentBundle:
    path = tmp_path / "bundle.pyz"
    path.write_bytes(b"PK-a bundle")
    return AgentBundle(path, "0" * 64, "ours" + "0" * 60, "1.2.3")


def _identity(bundle_hash: str, version: str = "1.2.3") -> str:
    return json.dumps({"version": version, "bundle_hash": bundle_hash, "protocol_version": 1})


def _install(qga: FakeQGA, bundle: AgentBundle, layout: GuestLayout = LINUX, **kw: Any) -> Any:
    return asyncio.run(install_agent(qga, layout, bundle, {"token": "t"}, **kw))  # type: ignore[arg-type]


def test_the_same_bundle_already_installed_is_not_pushed_again(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=_identity(bundle.bundle_hash))
    report = _install(qga, bundle)
    assert report.action == "skipped"
    assert report.installed_identity["bundle_hash"] == bundle.bundle_hash
    # Only the per-VM config (a new token) is written; the agent restarts to read it.
    assert qga.steps() == [
        "python", "firewall", "identity", "mkdir", "stop", "write /adare/run/config.json", "start",
    ]  # fmt: skip
    assert report.describe().startswith(f"skipped (found 1.2.3 {bundle.bundle_hash[:12]};")


def test_a_different_bundle_is_stopped_replaced_and_started(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=_identity("theirs" + "1" * 58))
    lines: list[str] = []
    report = _install(qga, bundle, progress=lines.append)
    assert report.action == "installed"
    assert qga.steps() == [
        "python", "firewall", "identity", "mkdir", "stop",
        "write /adare/agent/bundle.pyz.part", "mv", "write /adare/run/config.json", "start",
    ]  # fmt: skip
    assert ("exec", ["mv", "-f", "/adare/agent/bundle.pyz.part", "/adare/agent/bundle.pyz"]) in (
        qga.calls
    )
    assert lines == ["install: pushing the agent bundle (0 KiB) over QGA"]


def test_the_same_hash_of_another_version_is_installed(tmp_path: Path, bundle: AgentBundle) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=_identity(bundle.bundle_hash, version="0.9"))
    assert _install(qga, bundle).action == "installed"
    assert "write /adare/agent/bundle.pyz.part" in qga.steps()


def test_a_guest_without_an_agent_gets_one(tmp_path: Path, bundle: AgentBundle) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None)
    report = _install(qga, bundle)
    assert (report.action, report.installed_identity) == ("installed", None)
    assert "write /adare/agent/bundle.pyz.part" in qga.steps()
    assert report.describe() == "installed (none found; firewall: none active)"


@pytest.mark.parametrize(
    "answer",
    ["not json", "[1, 2]", '"a string"', json.dumps({"bundle_hash": None}), ""],
    ids=["garbage", "list", "string", "no-hash", "empty"],
)
def test_a_hostile_identity_answer_means_install(
    tmp_path: Path, bundle: AgentBundle, answer: str
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=answer)
    report = _install(qga, bundle)
    assert report.action == "installed"
    assert report.installed_identity is None or report.installed_identity == json.loads(answer)


def test_a_guest_without_firewall_cmd_gets_only_the_probe(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None, firewall_cmd=None)
    report = _install(qga, bundle)
    assert report.firewall == "none active"
    assert qga.firewall_args == []
    # Only the probe touched the firewall, and nothing else ran a firewall tool.
    assert qga.steps().count("firewall") == 1


def test_a_guest_with_firewalld_opens_the_agent_port_at_runtime_only(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None, firewall_cmd="echo success")
    report = _install(qga, bundle)
    assert qga.firewall_args == ["--state", f"--add-port={AGENT_PORT}/tcp"]
    assert report.firewall == f"firewalld: {AGENT_PORT}/tcp added (runtime)"


def test_an_installed_but_stopped_firewalld_is_left_alone(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    script = "echo not running; exit 252"
    qga = FakeQGA(tmp_path / "guest", identity=None, firewall_cmd=script)
    report = _install(qga, bundle)
    assert qga.firewall_args == ["--state"]
    assert report.firewall == "none active"


def test_a_failing_firewall_cmd_is_reported_and_install_goes_on(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    script = 'case "$1" in --state) echo running;; *) echo Error: INVALID_ZONE >&2; exit 252;; esac'
    qga = FakeQGA(tmp_path / "guest", identity=None, firewall_cmd=script)
    report = _install(qga, bundle)
    assert report.firewall == "firewalld: --add-port failed (252): Error: INVALID_ZONE"
    assert report.action == "installed"
    assert qga.steps()[-1] == "start"


@pytest.mark.parametrize(
    ("code", "out", "err", "expected"),
    [
        (1, "", "Traceback ...\nSyntaxError: invalid syntax", "firewall step failed (1): "
         "Traceback ...\nSyntaxError: invalid syntax"),
        (0, "garbage", "", "firewall step gave no report: 'garbage'"),
        (0, '{"actions": "all"}', "", "firewall step gave no report: '{\"actions\": \"all\"}'"),
        (0, "", "", "firewall step gave no report: ''"),
        (0, json.dumps({"port": 1, "actions": ["x" * 500] * 20}), "", "; ".join(["x" * 200] * 8)),
    ],
    ids=["crashed", "not-json", "not-a-list", "empty", "oversized"],
)
def test_a_firewall_report_is_guest_data(code: int, out: str, err: str, expected: str) -> None:
    assert describe_firewall(code, out, err) == expected


def test_a_windows_guest_gets_a_firewall_rule_and_no_shell(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None)
    report = _install(qga, bundle, WINDOWS)
    firewall = qga.calls[0][1]
    assert firewall[:3] == ["powershell", "-NoProfile", "-Command"]
    assert f"-LocalPort {AGENT_PORT}" in firewall[3]
    assert report.firewall == "rule added"
    assert not any(argv[0] == "/bin/sh" for kind, argv in qga.calls if kind == "exec")
    # Windows: no stop step (a fresh boot has none running), started detached by spawn.
    assert qga.steps() == [
        "firewall", "identity", "mkdir", r"write C:\adare\agent\bundle.pyz.part", "mv",
        r"write C:\adare\run\config.json", "start",
    ]  # fmt: skip
    assert qga.calls[-1][0] == "spawn"


@pytest.mark.parametrize(
    ("python", "message"),
    [
        (None, "the guest has no python3 (guest-exec: Failed to execute child process"),
        ("3.8.10", "the guest's python3 is 3.8.10; the agent needs Python >= 3.9 in the image"),
    ],
)
def test_a_guest_without_a_new_enough_python_fails_in_one_line_before_any_change(
    tmp_path: Path, bundle: AgentBundle, python: str | None, message: str
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None, python=python)
    with pytest.raises(ImageError) as caught:
        _install(qga, bundle)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert qga.steps() == ["python"]


def test_the_agent_starts_as_a_transient_systemd_unit_where_systemd_runs(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None)
    _install(qga, bundle)
    script = qga.calls[-1][1][2]
    assert "[ -d /run/systemd/system ]" in script
    assert "systemd-run --quiet --unit=adare-agent-qga --collect -p Restart=on-failure" in script
    assert "else nohup setsid python3 '/adare/agent/bundle.pyz' '/adare/run'" in script


def test_a_failed_mkdir_stops_the_install_before_anything_is_written(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    qga = FakeQGA(tmp_path / "guest", identity=None, failing={"mkdir"})
    with pytest.raises(QGAError, match="could not create /adare/agent in the guest"):
        _install(qga, bundle)
    assert not any(kind == "write" for kind, _ in qga.calls)


def _manifest(tmp_path: Path, *, initrd: bool, **agent: Any) -> ImageManifest:
    return ImageManifest(
        name="t", disk=tmp_path / "disk.qcow2",
        initrd=tmp_path / "initrd.gz" if initrd else None, agent=AgentSpec(**agent),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("initrd", "agent", "boot", "by_initrd"),
    [
        (True, {"baked": True, "fw_cfg": True}, True, False),
        (True, {"baked": True, "initrd_handoff": True}, True, True),
        (True, {"baked": True, "fw_cfg": True, "initrd_handoff": True}, True, True),
        (False, {"baked": True, "initrd_handoff": True}, False, False),
        (False, {"baked": True, "fw_cfg": True, "initrd_handoff": True}, True, False),
        (True, {"baked": False, "fw_cfg": True, "initrd_handoff": True}, False, True),
        (True, {"baked": True}, False, False),
        (True, {}, False, False),
    ],
    ids=[
        "fw_cfg", "initrd", "both", "initrd-handoff-without-initrd", "fw_cfg-without-initrd",
        "not-baked", "baked-without-route", "plain-image",
    ],
)  # fmt: skip
def test_the_route_follows_the_manifest(
    tmp_path: Path, initrd: bool, agent: dict[str, bool], boot: bool, by_initrd: bool
) -> None:
    manifest = _manifest(tmp_path, initrd=initrd, **agent)
    assert uses_boot_handoff(manifest) is boot
    assert uses_initrd_handoff(manifest) is by_initrd
