"""What the plugin adds to pytest's output: the header line, failure evidence, and
infrastructure failures reported as errors.

When a test that used a VM fails or errors, its report gets sections with the console
tail, the agent log tail and a screenshot reference, and the evidence files land in
``<--adare-artifacts>/<sanitised test id>/`` (``console.log``, ``agent.log``,
``screenshot.png``, plus whatever the test exported there). pytest-html gets the
screenshot as an extra and JUnit XML gets the paths as properties.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.errors import console_tail_of, printable
from pytest_adare.plugin.fixtures import (
    ITEM_VMS_KEY,
    KEEP_HINTS_KEY,
    artifacts_dir_for,
)
from pytest_adare.plugin.hypervisors import workers_per_host
from pytest_adare.plugin.matrix import session_images
from pytest_adare.plugin.options import AdareOptions, adare_options
from pytest_adare.plugin.pool import PooledVM, is_infrastructure_error

TAIL_LINES = 40
INFRA_ATTR = "adare_infrastructure"
KEEP_HINTS_OUTPUT = "adare_keep_hints"


def qemu_version(binary: str = "qemu-system-x86_64") -> str:
    """The first line of ``qemu-system-x86_64 --version``, or why it is unknown."""
    if shutil.which(binary) is None:
        return f"{binary} not found on PATH"
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{binary} --version failed: {error}"
    first = (done.stdout or done.stderr).strip().splitlines()
    return first[0] if first else f"{binary} --version printed nothing"


def kvm_note() -> str:
    """What ``auto`` will pick, decided without starting QEMU (the boot line says more)."""
    # Deferred: only sessions that print the adare header need the accel module.
    from pytest_adare.machine_tools.accel import kvm_unusable_reason

    unusable = kvm_unusable_reason()
    if unusable:
        return f"TCG: {unusable}"
    return "KVM if a short probe boot makes progress, else TCG; each VM's 'qemu:' line says which"


GUI_AUTO_NOTE = (
    "the agent's screen on a desktop image whose agent can take a screenshot, else QEMU's; "
    "each VM's 'gui:' line says which and why"
)


FIRMWARE_AUTO_NOTE = (
    "the manifest's, or a bare disk's partition table: GPT with an EFI system partition "
    "boots OVMF, else SeaBIOS; each VM's 'qemu:' line says which"
)


def hypervisor_line(config: pytest.Config, options: AdareOptions) -> str:
    """``hypervisor qemu:///system (libvirt)``, or with several the workers on each."""
    if len(options.hypervisors) == 1:
        return f"hypervisor {options.hypervisors[0]} (libvirt)"
    workers = config.getoption("numprocesses", None)
    counts = workers_per_host(options.hypervisors, workers if isinstance(workers, int) else None)
    limit = f", at most {options.hypervisor_limit} each" if options.hypervisor_limit else ""
    hosts = ", ".join(f"{uri} ({n} VM{'s' if n != 1 else ''})" for uri, n in counts.items())
    return f"hypervisors (libvirt{limit}): {hosts}"


def pytest_report_header(config: pytest.Config) -> str:
    options = adare_options(config)
    if not options.vm:
        return "adare: no --adare-vm given (tests that need a VM will be skipped)"
    vm = options.session_vm
    accel = vm.accel if vm.accel != "auto" else f"auto ({kvm_note()})"
    gui = vm.gui if vm.gui != "auto" else f"auto ({GUI_AUTO_NOTE})"
    firmware = vm.firmware if vm.firmware != "auto" else f"auto ({FIRMWARE_AUTO_NOTE})"
    where = f", {hypervisor_line(config, options)}" if options.hypervisors else ""
    # A matrix: every image its tests run on (the options below are each one's).
    # (a recipe of several suites is one image per suite)
    specs = [image.spec for image in session_images(config)]
    images = f"images {', '.join(specs)}" if len(specs) > 1 else ""
    return (
        f"adare: {images or f'image {options.vm}'}, accel {accel}, isolation {options.isolation}, "
        f"firmware {firmware}, gui {gui}{where}, {qemu_version()}"
    )


def _write_evidence(
    pooled: PooledVM, folder: Path, suffix: str, infra: bool, label: str = ""
) -> tuple[list[tuple[str, str]], Path | None]:
    """Save one VM's evidence into ``folder``; returns report sections (their titles
    end in ``label``) and the screenshot."""
    vm = pooled.vm
    sections: list[tuple[str, str]] = []
    # tail() leads with what killed the guest (a panic, an oops...), wherever it was.
    console = printable("\n".join(vm.console_tail(TAIL_LINES)))
    source = vm.machine.console_log_path
    if source.exists():
        shutil.copyfile(source, folder / f"console{suffix}.log")
    else:
        (folder / f"console{suffix}.log").write_text(console)
    sections.append((f"adare console tail{label}", console or "(empty)"))
    try:
        agent_log = "\n".join(vm.agent_log_tail(TAIL_LINES))
        (folder / f"agent{suffix}.log").write_text(agent_log)
        agent_log = printable(agent_log)
    except Exception as error:  # its text may quote the guest (an agent's answer)
        agent_log = printable(f"(agent log unavailable: {error})")
    sections.append((f"adare agent log tail{label}", agent_log or "(empty)"))
    shot = folder / f"screenshot{suffix}.png"
    try:
        use_agent = not infra and vm.gui == "agent"
        image = vm.guest.screenshot() if use_agent else vm.screendump()
        image.save(shot)
        how = "agent screenshot" if use_agent else "host screendump"
        sections.append((f"adare screenshot{label}", f"{how}: {shot}"))
    except Exception as error:
        sections.append((f"adare screenshot{label}", printable(f"(no screenshot: {error})")))
        return sections, None
    return sections, shot


def _attach_evidence(item: pytest.Item, report: pytest.TestReport, infra: bool) -> None:
    pooled_vms = item.stash.get(ITEM_VMS_KEY, [])
    folder = artifacts_dir_for(item)
    screenshots: list[Path] = []
    for index, pooled in enumerate(pooled_vms):
        pooled.failed_tests.append(item.nodeid)
        # With several VMs (a LAN's members, a factory's) each section says whose it is.
        label = f" ({pooled.vm.name}: {pooled.request.describe()})" if len(pooled_vms) > 1 else ""
        suffix = f"-{index}" if index else ""
        sections, shot = _write_evidence(pooled, folder, suffix, infra, label)
        report.sections.extend(sections)
        if shot is not None:
            screenshots.append(shot)
    files = sorted(p.name for p in folder.iterdir())
    report.sections.append(
        ("adare artifacts", f"{folder}\n" + "\n".join(f"  {name}" for name in files))
    )
    # JUnit XML writes the properties of the teardown report, which copies the item's.
    properties = [("adare_artifacts", str(folder))]
    properties += [("adare_screenshot", str(shot)) for shot in screenshots]
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    _html_extras(item.config, report, screenshots)


def _html_extras(config: pytest.Config, report: pytest.TestReport, screenshots: list[Path]) -> None:
    """Screenshots as pytest-html image extras (base64: works with and without
    ``--self-contained-html``)."""
    if not config.pluginmanager.hasplugin("html"):
        return
    # Optional plugin: imported only when pytest-html is active.
    import pytest_html  # type: ignore[import-not-found, import-untyped, unused-ignore]

    extras: list[Any] = list(getattr(report, "extras", []))
    for shot in screenshots:
        encoded = base64.b64encode(shot.read_bytes()).decode("ascii")
        extras.append(pytest_html.extras.image(encoded, name=shot.name))
    report.extras = extras  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.failed or not item.stash.get(ITEM_VMS_KEY, []):
        if (
            report.failed
            and call.excinfo is not None
            and is_infrastructure_error(call.excinfo.value)
        ):
            report.longrepr = printable(f"adare: {call.excinfo.value}")
            tail = console_tail_of(call.excinfo.value)
            if tail:
                shown = printable("\n".join(tail))
                report.sections.append(("adare console tail (failed boot)", shown))
        return report
    error = call.excinfo.value if call.excinfo is not None else None
    infra = error is not None and is_infrastructure_error(error)
    if infra:
        setattr(report, INFRA_ATTR, True)
        for pooled in item.stash.get(ITEM_VMS_KEY, []):
            pooled.suspect = True
        if report.when != "call":
            report.longrepr = printable(f"adare: {error}")
    _attach_evidence(item, report, infra)
    if infra:
        _say_what_killed_the_guest(report, item.stash.get(ITEM_VMS_KEY, []), str(error))
    return report


def _say_what_killed_the_guest(
    report: pytest.TestReport, pooled_vms: list[PooledVM], message: str
) -> None:
    """Add the console's fatal lines (a panic, an oops...) to an infrastructure error
    that does not show them: an ``AgentDisconnected`` knows nothing of the console,
    while a ``VMDied``'s console tail already leads with them."""
    for pooled in pooled_vms:
        fatal = pooled.vm.console_tail(0)  # n=0: only what killed the guest, if anything
        if not fatal or printable(fatal[0]) in message:
            continue
        text = printable("\n".join(fatal))
        if isinstance(report.longrepr, str):
            report.longrepr = f"{report.longrepr}\n{text}"
        elif callable(add_section := getattr(report.longrepr, "addsection", None)):
            add_section("adare: what killed the guest", text)  # a traceback's own section


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str | tuple[str, dict[str, bool]]] | None:
    if report.when == "call" and report.failed and getattr(report, INFRA_ATTR, False):
        return "error", "E", ("ERROR", {"red": True})
    if (
        report.when == "call"
        and config.get_verbosity() > 0
        and report.passed
        and not hasattr(report, "wasxfail")
    ):
        clean = dict(report.user_properties).get("adare_clean_state")
        if clean:
            return "passed", ".", (f"PASSED ({clean})", {"green": True})
    return None


def _keep_hints(config: pytest.Config) -> list[str]:
    return config.stash.get(KEEP_HINTS_KEY, [])


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[KEEP_HINTS_OUTPUT] = _keep_hints(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    hints = getattr(node, "workeroutput", {}).get(KEEP_HINTS_OUTPUT, [])
    node.config.stash.setdefault(KEEP_HINTS_KEY, []).extend(hints)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    hints = _keep_hints(config)
    if hints:
        terminalreporter.write_sep("-", "adare: kept VMs")
        for hint in hints:
            terminalreporter.write_line(hint)
