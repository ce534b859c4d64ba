"""The agent bundle under a real Python 3.9: Debian 11's, in a chroot (tests/py39_root.py).

``PYTHON_FLOOR`` says the agent runs on a guest's Python 3.9 (Debian 11, RHEL 9).
Here the bundle the host builds is compiled and imported by bullseye's python3, then
run as an agent in the chroot (which shares the host's network, so it listens on
127.0.0.1) and driven by the host's real client: shell, push and pull, a filesystem
snapshot, test functions (an uploaded collection and every stock check), system
info, and the refusal of badly typed params. Needs root and mmdebstrap (the root is
built once and cached); the floor check's refusal of an older Python runs anywhere.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer, default_groups
from adare_guest.tool_params import ParamError
from adare_guest.tools.base import AgentState, BoundTool
from pytest_adare.agent.desktop_ready import FOCUS_PROBE
from pytest_adare.agent.diagnosis import (
    FACTS_SCRIPT,
    AgentFacts,
    guest_facts,
    listening_addresses,
)
from pytest_adare.agent.install import (
    FIREWALL_SCRIPT,
    IDENTITY_SCRIPT,
    PYTHON_FLOOR,
    PYTHON_VERSION_SCRIPT,
    STOP_SCRIPT,
    GuestLayout,
    check_python,
    installed_identity,
)
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.errors import ImageError, ToolError
from pytest_adare.guest import AsyncGuest
from pytest_adare.image.agent_bundle import AgentBundle, build_agent_bundle
from pytest_adare.machine_tools.qga import QGAExecResult
from tests.agent import iso_corpus, stock_scenario
from tests.py39_root import chroot_argv, chroot_env, py39_root, run, scratch_dir, unavailable_reason

TOKEN = "py39-test-token"
START_TIMEOUT = 60.0
_REASON = unavailable_reason()
needs_root = pytest.mark.skipif(_REASON is not None, reason=f"Python 3.9 root: {_REASON}")

# Run by the guest's python3 on the bundle (argv[1]): compile every .py member, report.
COMPILE_ALL = """
import json, sys, zipfile
failed = {}
with zipfile.ZipFile(sys.argv[1]) as bundle:
    names = sorted(n for n in bundle.namelist() if n.endswith(".py"))
    for name in names:
        try:
            compile(bundle.read(name), name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            failed[name] = "%s (line %s)" % (exc.msg, exc.lineno)
print(json.dumps({"version": list(sys.version_info[:3]), "compiled": names, "failed": failed}))
"""

# Run with the bundle first on sys.path: import every module of ours, report failures.
IMPORT_ALL = """
import importlib, json, sys, zipfile
sys.path.insert(0, sys.argv[1])
failed = {}
with zipfile.ZipFile(sys.argv[1]) as bundle:
    names = sorted(n for n in bundle.namelist() if n.endswith(".py"))
for name in names:
    module = name[:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    if module.split(".")[0] not in ("adare_guest", "frame_codec"):
        continue
    if module.endswith("__main__"):
        continue
    try:
        importlib.import_module(module)
        where = sys.modules[module].__file__ or ""
        if not where.startswith(sys.argv[1]):
            failed[module] = "imported from %s, not from the bundle" % where
    except Exception as exc:
        failed[module] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(failed, sort_keys=True))
"""

# Read every string of a corpus (argv[2], JSON) with adare_guest.iso8601 from the bundle.
READ_ISO = """
import json, sys
sys.path.insert(0, sys.argv[1])
from adare_guest import iso8601
def read(text):
    try:
        return iso8601.fromisoformat(text).isoformat()
    except ValueError:
        return None
with open(sys.argv[2]) as handle:
    corpus = json.load(handle)
report = {name: [read(text) for text in texts] for name, texts in corpus.items()}
report["native"] = iso8601._NATIVE
print(json.dumps(report))
"""

COLLECTION = """
import asyncio
import sys

from adare_guest.testfunctions import testfunction


@testfunction
def content_is(ctx, path, expected):
    with open(path) as handle:
        actual = handle.read()
    ctx.fail_if(actual != expected, f"{path} holds {actual!r}, not {expected!r}")
    return f"{path} holds {expected!r} (python {sys.version_info[0]}.{sys.version_info[1]})"


@testfunction
async def awaits(ctx, delay):
    await asyncio.sleep(delay)
    return ["awaited", delay]
"""


@pytest.fixture(scope="module")
def root() -> Path:
    """The Debian 11 root (built on first use, then cached)."""
    return py39_root(log=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="module")
def bundle() -> AgentBundle:
    return build_agent_bundle()


@dataclass
class ChrootAgent:
    """An agent running ``bundle.pyz`` under the root's python3."""

    root: Path
    host_dir: Path
    """The agent's scratch directory, seen from the host."""
    inside: str
    """The same directory, seen from inside the root."""
    port: int
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)

    def host_path(self, inside_path: str) -> Path:
        """A path inside the root, as the host sees it."""
        return self.root / inside_path.lstrip("/")

    def output(self) -> str:
        texts = []
        for name in ("agent.out", "run/agent.log"):
            file = self.host_dir / name
            if file.exists():
                texts.append(f"--- {name}\n{file.read_text(errors='replace')[-4000:]}")
        return "\n".join(texts)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(agent: ChrootAgent) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if agent.proc.poll() is not None:
            raise AssertionError(
                f"the agent exited ({agent.proc.returncode}) under Python 3.9:\n{agent.output()}"
            )
        try:
            socket.create_connection(("127.0.0.1", agent.port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the agent did not listen within {START_TIMEOUT} s:\n{agent.output()}")


@pytest.fixture(scope="module")
def agent(root: Path, bundle: AgentBundle) -> Iterator[ChrootAgent]:
    """``python3 bundle.pyz RUN_DIR`` in the root, listening on 127.0.0.1 with a token."""
    with scratch_dir(root) as (host_dir, inside):
        shutil.copy(bundle.path, host_dir / "bundle.pyz")
        (host_dir / "run").mkdir()
        port = _free_port()
        config = {
            "host": "127.0.0.1",
            "port": port,
            "token": TOKEN,
            "logfile": f"{inside}/run/agent.log",
        }
        (host_dir / "run" / "config.json").write_text(json.dumps(config))
        argv = ["python3", f"{inside}/bundle.pyz", f"{inside}/run"]
        with (host_dir / "agent.out").open("wb") as out:
            proc = subprocess.Popen(
                chroot_argv(root, argv), env=chroot_env(), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        running = ChrootAgent(root, host_dir, inside, port, proc)
        try:
            _wait_listening(running)
            yield running
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)


@pytest_asyncio.fixture
async def py39_guest(agent: ChrootAgent) -> AsyncIterator[AsyncGuest]:
    client = await AgentClient.connect("127.0.0.1", agent.port, TOKEN)
    try:
        yield AsyncGuest(client, agent_root=f"{agent.inside}/run")
    finally:
        await client.close()


def _guest_python(root: Path) -> str:
    return run(root, ["python3", "-c", PYTHON_VERSION_SCRIPT]).stdout.strip()


def _host_tools() -> dict[str, BoundTool]:
    found: dict[str, BoundTool] = {}
    for factory in default_groups():
        found.update(factory(AgentConfig(), AgentState()).tools())
    return found


# --------------------------------------------------------------------------- the bundle


@needs_root
def test_the_root_has_python_3_9(root: Path) -> None:
    assert _guest_python(root).startswith("3.9.")


@needs_root
def test_every_python_file_of_the_bundle_compiles_under_python_3_9(
    root: Path, bundle: AgentBundle
) -> None:
    with scratch_dir(root) as (host_dir, inside):
        shutil.copy(bundle.path, host_dir / "bundle.pyz")
        done = run(root, ["python3", "-c", COMPILE_ALL, f"{inside}/bundle.pyz"])
    report = json.loads(done.stdout)
    assert report["version"][:2] == [3, 9]
    with zipfile.ZipFile(bundle.path) as archive:
        members = sorted(n for n in archive.namelist() if n.endswith(".py"))
    assert report["compiled"] == members and len(members) > 50
    assert report["failed"] == {}


@needs_root
def test_every_module_of_ours_imports_under_python_3_9_as_it_does_on_the_host(
    root: Path, bundle: AgentBundle, tmp_path: Path
) -> None:
    """Modules that cannot import on this platform (Windows-only ones) fail on both."""
    with scratch_dir(root) as (host_dir, inside):
        shutil.copy(bundle.path, host_dir / "bundle.pyz")
        guest = json.loads(run(root, ["python3", "-c", IMPORT_ALL, f"{inside}/bundle.pyz"]).stdout)
    # The host's python, isolated from its site-packages: the bundle is all it has.
    shutil.copy(bundle.path, tmp_path / "bundle.pyz")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORT_ALL, str(tmp_path / "bundle.pyz")],
        capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path,
    )  # fmt: skip
    host = json.loads(done.stdout)
    assert sorted(guest) == sorted(host), {"python 3.9": guest, "host": host}


@needs_root
def test_iso_8601_reads_under_python_3_9_as_under_the_hosts_python(
    root: Path, bundle: AgentBundle
) -> None:
    """``adare_guest.iso8601`` on 3.9 against ``datetime.fromisoformat`` of 3.11 and later."""
    corpus = {"well_formed": iso_corpus.WELL_FORMED, "malformed": iso_corpus.MALFORMED}
    with scratch_dir(root) as (host_dir, inside):
        shutil.copy(bundle.path, host_dir / "bundle.pyz")
        (host_dir / "corpus.json").write_text(json.dumps(corpus))
        done = run(
            root, ["python3", "-c", READ_ISO, f"{inside}/bundle.pyz", f"{inside}/corpus.json"]
        )
    report = json.loads(done.stdout)
    assert report["native"] is False  # 3.9: the rewriting path, not datetime's own
    assert _native_iso_reads(iso_corpus.WELL_FORMED) == report["well_formed"]
    native = _native_iso_reads(iso_corpus.MALFORMED)
    read = report["malformed"]
    assert not [
        text
        for text, ours, theirs in zip(iso_corpus.MALFORMED, read, native, strict=True)
        if ours not in (None, theirs)
    ]


def _native_iso_reads(texts: list[str]) -> list[str | None]:
    assert sys.version_info >= (3, 11)  # the host's own fromisoformat is the reference
    answers: list[str | None] = []
    for text in texts:
        try:
            answers.append(datetime.datetime.fromisoformat(text).isoformat())
        except ValueError:
            answers.append(None)
    return answers


GUEST_SCRIPTS = {
    "IDENTITY_SCRIPT": IDENTITY_SCRIPT,
    "PYTHON_VERSION_SCRIPT": PYTHON_VERSION_SCRIPT,
    "STOP_SCRIPT": STOP_SCRIPT,
    "FIREWALL_SCRIPT": FIREWALL_SCRIPT,
    "FACTS_SCRIPT": FACTS_SCRIPT,
    "FOCUS_PROBE": FOCUS_PROBE,
}
"""What the host runs with the guest's ``python3 -c`` (or ``python3 -``)."""

COMPILE_SCRIPTS = """
import json, sys
failed = {}
for name, source in json.load(sys.stdin).items():
    try:
        compile(source, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        failed[name] = "%s (line %s)" % (exc.msg, exc.lineno)
print(json.dumps(failed))
"""


@needs_root
def test_the_scripts_the_host_runs_with_the_guests_python_compile_under_3_9(root: Path) -> None:
    done = subprocess.run(
        chroot_argv(root, ["python3", "-c", COMPILE_SCRIPTS]), input=json.dumps(GUEST_SCRIPTS),
        capture_output=True, text=True, env=chroot_env(), timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {}


# --------------------------------------------------------------------------- the floor


class ChrootQGA:
    """The ``exec`` of a QGA client, run by the root's own programs."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input_data: bytes | None = None,
        env: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> QGAExecResult:
        done = await asyncio.to_thread(
            subprocess.run, chroot_argv(self.root, argv), input=input_data or b"",
            capture_output=True, env=chroot_env(), timeout=timeout, check=False,
        )  # fmt: skip
        return QGAExecResult(done.returncode, done.stdout, done.stderr)


class AnsweringQGA:
    """The ``exec`` of a QGA client whose python3 reports ``version``."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.calls: list[list[str]] = []

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input_data: bytes | None = None,
        env: Sequence[str] = (),
        timeout: float = 60.0,
    ) -> QGAExecResult:
        self.calls.append(list(argv))
        return QGAExecResult(0, f"{self.version}\n".encode(), b"")


LINUX = GuestLayout("linux", "/adare/run", None)


def test_the_floor_is_python_3_9() -> None:
    assert PYTHON_FLOOR == (3, 9)


@needs_root
@pytest.mark.asyncio
async def test_the_floor_check_accepts_the_real_python_3_9(root: Path) -> None:
    version = await check_python(ChrootQGA(root), LINUX)  # type: ignore[arg-type]
    assert version == _guest_python(root) and version.startswith("3.9.")


@pytest.mark.asyncio
@pytest.mark.parametrize("version", ["3.8.10", "3.8.0", "2.7.18"])
async def test_the_floor_check_refuses_an_older_python_in_one_line(version: str) -> None:
    qga = AnsweringQGA(version)
    with pytest.raises(ImageError) as caught:
        await check_python(qga, LINUX)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"the guest's python3 is {version}; the agent needs Python >= 3.9 in the image"
    )
    assert qga.calls == [["python3", "-c", PYTHON_VERSION_SCRIPT]]


@needs_root
@pytest.mark.asyncio
async def test_the_install_identity_probe_reads_the_bundle_under_python_3_9(
    root: Path, bundle: AgentBundle
) -> None:
    with scratch_dir(root) as (host_dir, inside):
        (host_dir / "agent").mkdir()
        shutil.copy(bundle.path, host_dir / "agent" / "bundle.pyz")
        layout = GuestLayout("linux", f"{inside}/run", None)
        assert layout.bundle_path == f"{inside}/agent/bundle.pyz"
        identity = await installed_identity(ChrootQGA(root), layout)  # type: ignore[arg-type]
    assert identity is not None, IDENTITY_SCRIPT
    assert identity["bundle_hash"] == bundle.bundle_hash


# --------------------------------------------------------------------------- the agent


@needs_root
@pytest.mark.asyncio
async def test_the_agent_runs_the_bundle_under_python_3_9_with_every_tool(
    py39_guest: AsyncGuest, root: Path, bundle: AgentBundle
) -> None:
    info = py39_guest.server_info
    assert (info["bundle_hash"], info["python"]) == (bundle.bundle_hash, _guest_python(root))
    status = await py39_guest.call("get_status")
    assert status["python"] == info["python"]
    # A tool group whose module failed to import would be missing, not an error.
    assert info["tools"] == AdareVMServer(AgentConfig()).identity()["tools"]


@needs_root
@pytest.mark.asyncio
async def test_shell_runs_in_the_root(py39_guest: AsyncGuest, agent: ChrootAgent) -> None:
    result = await py39_guest.shell("echo hi; echo oops >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "hi\n", "oops\n")
    version = await py39_guest.shell("python3 -c 'import sys; print(sys.version_info[:2])'")
    assert version.check().stdout == "(3, 9)\n"
    here = await py39_guest.shell("pwd", cwd=agent.inside)
    assert here.check().stdout == f"{agent.inside}\n"


@needs_root
@pytest.mark.asyncio
async def test_push_then_pull_keeps_the_bytes(
    py39_guest: AsyncGuest, agent: ChrootAgent, tmp_path: Path
) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3 * 2**20 + 77))
    inside = f"{agent.inside}/pushed/copy.bin"
    await py39_guest.push(source, inside)
    assert agent.host_path(inside).read_bytes() == source.read_bytes()
    back = await py39_guest.pull(inside, tmp_path / "back.bin")
    assert back.read_bytes() == source.read_bytes()


@needs_root
@pytest.mark.asyncio
async def test_a_filesystem_snapshot_matches_the_files(
    py39_guest: AsyncGuest, agent: ChrootAgent
) -> None:
    tree = f"{agent.inside}/tree"
    await py39_guest.shell(f"mkdir -p {tree}/sub && printf abc > {tree}/a && ln -s a {tree}/link")
    snapshot = await py39_guest.fs_snapshot(tree, hash=True)
    assert sorted(snapshot) == sorted([tree, f"{tree}/sub", f"{tree}/a", f"{tree}/link"])
    entry = snapshot[f"{tree}/a"]
    host_file = agent.host_path(f"{tree}/a")
    assert (entry.kind, entry.size, entry.inode) == ("file", 3, host_file.stat().st_ino)
    assert entry.sha256 == hashlib.sha256(b"abc").hexdigest()
    assert snapshot[f"{tree}/link"].target == "a"
    async with py39_guest.watch_fs(tree) as watch:
        await py39_guest.shell(f"rm {tree}/a; echo new > {tree}/sub/new")
    assert watch.diff is not None
    assert (watch.diff.created, watch.diff.deleted) == ({f"{tree}/sub/new"}, {f"{tree}/a"})


@needs_root
@pytest.mark.asyncio
async def test_an_uploaded_test_function_runs(
    py39_guest: AsyncGuest, agent: ChrootAgent, tmp_path: Path
) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "checks.py").write_text(textwrap.dedent(COLLECTION))
    assert (await py39_guest.upload_testfunctions(tmp_path))["collections"] == ["checks"]
    path = f"{agent.inside}/content.txt"
    agent.host_path(path).write_text("expected")
    passed = await py39_guest.run_test("checks.content_is", path=path, expected="expected")
    assert passed.status == "SUCCESS"
    assert passed.details == [f"{path} holds 'expected' (python 3.9)"]
    failed = await py39_guest.run_test("checks.content_is", path=path, expected="other")
    assert failed.status == "FAILED" and "holds 'expected', not 'other'" in failed.details[0]
    awaited = await py39_guest.run_test("checks.awaits", delay=0.05)
    assert awaited.status == "SUCCESS", awaited


@needs_root
@pytest.mark.asyncio
async def test_every_stock_check_gives_its_verdict(
    py39_guest: AsyncGuest, agent: ChrootAgent
) -> None:
    """The stock collections (SQLite, JSON, CSV, XML, placeholders...) on 3.9's stdlib."""
    evidence = f"{agent.inside}/evidence"
    made = await py39_guest.shell(
        f"python3 - {evidence} <<'ADARE_EOF'\n{stock_scenario.MAKE_FILES}\nADARE_EOF"
    )
    listener = int(made.check().stdout.strip())
    try:
        port = await py39_guest.shell(
            f"for i in $(seq 100); do [ -s {evidence}/port ] && break; sleep 0.1; done; "
            f"cat {evidence}/port"
        )
        wrong = []
        for name, params, expected in stock_scenario.cases(evidence, int(port.check().stdout)):
            answer = await py39_guest.call("run_test", test_name=name, resolved_test_data=params)
            if answer["result"]["status"] != expected:
                wrong.append((name, params, expected, answer["result"]))
        assert not wrong, "\n".join(map(str, wrong))
    finally:
        os.killpg(listener, signal.SIGKILL)  # no pid namespace: the guest's pid is the host's


@needs_root
@pytest.mark.asyncio
async def test_system_info_comes_from_the_root(py39_guest: AsyncGuest, root: Path) -> None:
    info = (await py39_guest.call("collect_system_info"))["system_info"]
    assert info["python"] == _guest_python(root)
    assert info["python_executable"] == "/usr/bin/python3"
    # Python 3.9 has no platform.freedesktop_os_release: the agent reads the file itself.
    fields = dict(
        line.split("=", 1) for line in (root / "etc/os-release").read_text().splitlines() if line
    )
    assert info["os_release"]["ID"] == fields["ID"] == "debian"
    assert info["os_release"]["VERSION_ID"] == fields["VERSION_ID"].strip('"') == "11"
    assert info["os_release"]["PRETTY_NAME"] == fields["PRETTY_NAME"].strip('"')
    assert info["memory"]["MemTotal"] > 0


@needs_root
@pytest.mark.asyncio
async def test_badly_typed_params_are_refused_as_on_the_host(
    py39_guest: AsyncGuest, agent: ChrootAgent
) -> None:
    """The guest evaluates ``str | None`` annotations without PEP 604: same checks."""
    tool = _host_tools()["execute_shell"]
    refused = 0
    for param in tool.params:
        if param == "shell_command":
            continue
        for value in (5, "text", 1.5, None, [1], {"k": [1]}):
            params = {"shell_command": "true", "cwd": agent.inside, param: value}
            try:
                tool.validate(params)
            except ParamError as exc:
                with pytest.raises(ToolError) as caught:  # ``timeout`` is the tool's param here
                    await py39_guest.connection.call("execute_shell", params)
                assert str(exc) in str(caught.value)
                refused += 1
    assert refused > 10


@needs_root
@pytest.mark.asyncio
async def test_the_unreachable_agent_diagnosis_runs_under_python_3_9(
    agent: ChrootAgent, root: Path
) -> None:
    """The facts script (``python3 -c`` over QGA when the host cannot connect) finds the
    running agent, its listening socket and its log."""
    await asyncio.sleep(max(0.0, agent.started + 2.5 - time.monotonic()))  # counted at 2 s
    qga = ChrootQGA(root)

    async def run_in_root(argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        result = await qga.exec(argv, timeout=timeout)
        return result.exitcode, result.stdout.decode(), result.stderr.decode()

    facts = AgentFacts(port=agent.port)
    await guest_facts(run_in_root, facts, [f"{agent.inside}/run/agent.log"])
    assert facts.qga_error is None
    assert agent.proc.pid in (facts.agent_pids or [])
    assert listening_addresses(facts.proc_net_tcp, agent.port) == ["127.0.0.1"]
    assert facts.log_path == f"{agent.inside}/run/agent.log" and facts.log_tail


@needs_root
@pytest.mark.asyncio
@pytest.mark.parametrize("cwd", [False, True], ids=["spawn", "subprocess"])
async def test_a_command_past_its_timeout_is_killed_and_keeps_its_output(
    py39_guest: AsyncGuest, agent: ChrootAgent, cwd: bool
) -> None:
    """``asyncio.wait_for`` raises ``asyncio.TimeoutError``, not ``TimeoutError``, on 3.9.

    Both ways of running a command: posix_spawn (no ``cwd``), ``subprocess`` (``cwd``).
    """
    marker = f"78{time.time_ns() % 10**7}"
    started = time.monotonic()
    params: dict[str, object] = {
        "shell_command": f"echo before; sleep {marker} & sleep {marker}1; echo never",
        "timeout": 1.0,  # the tool's param, so not through AsyncGuest.call
    }
    if cwd:
        params["cwd"] = agent.inside
    result = await py39_guest.connection.call("execute_shell", params, 30)
    assert time.monotonic() - started < 10
    assert result["status"] == "error" and result["timed_out"] is True, result
    assert "timed out after 1 s" in result["message"]
    assert result["stdout"] == "before\n" and result["returncode"] is None
    left = await py39_guest.shell(f"pgrep -f 'sleep {marker}' || true")
    assert left.stdout == ""
