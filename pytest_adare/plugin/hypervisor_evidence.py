"""``--adare-pcap`` and ``--adare-evidence``: hypervisor evidence per test, in its artifacts.

With ``--adare-pcap`` each VM the test uses captures its network traffic during the
test's call phase into ``network.pcap`` (``network-1.pcap``, ... for further VMs); the
capture stops in teardown. With ``--adare-evidence=on-failure`` (a failed call) or
``always``, each VM's bundle (:meth:`pytest_adare.vm.VM.collect_evidence`) is written
to ``evidence/`` (``evidence-1/``, ...) in the artifacts once the call phase is over,
while the VM still holds the test's state; the report names it (section ``adare
evidence bundle``, property ``adare_evidence``). Nothing here imports the VM layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.plugin.fixtures import ITEM_VMS_KEY, artifacts_dir_for
from pytest_adare.plugin.options import adare_options
from pytest_adare.plugin.pool import PooledVM

CAPTURES_KEY = pytest.StashKey[list[contextlib.AbstractContextManager[Any]]]()


def _numbered(name: str, index: int, suffix: str = "") -> str:
    return f"{name}-{index}{suffix}" if index else f"{name}{suffix}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Start a capture on each of the test's VMs when ``--adare-pcap`` asks for it."""
    pooled_vms: list[PooledVM] = item.stash.get(ITEM_VMS_KEY, [])
    if adare_options(item.config).pcap and pooled_vms:
        started = item.stash.setdefault(CAPTURES_KEY, [])
        folder = artifacts_dir_for(item)
        for index, pooled in enumerate(pooled_vms):
            target = folder / _numbered("network", index, ".pcap")
            target.unlink(missing_ok=True)  # a rerun of the same test id
            capture = pooled.vm.network_capture(target)
            capture.__enter__()
            started.append(capture)
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Stop this test's captures (QEMU closes the pcap files)."""
    for capture in item.stash.get(CAPTURES_KEY, []):
        with contextlib.suppress(Exception):
            capture.__exit__(None, None, None)
    item.stash[CAPTURES_KEY] = []


def _wants_bundle(mode: str, report: pytest.TestReport) -> bool:
    return report.when == "call" and (mode == "always" or (mode == "on-failure" and report.failed))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    pooled_vms: list[PooledVM] = item.stash.get(ITEM_VMS_KEY, [])
    if not pooled_vms or not _wants_bundle(adare_options(item.config).evidence, report):
        return report
    folder = artifacts_dir_for(item)
    for index, pooled in enumerate(pooled_vms):
        dest = folder / _numbered("evidence", index)
        report.sections.append(("adare evidence bundle", _collect(pooled.vm, dest, item)))
        item.user_properties.append(("adare_evidence", str(dest)))
        report.user_properties.append(("adare_evidence", str(dest)))
    return report


def _collect(vm: Any, dest: Path, item: pytest.Item) -> str:
    """Write one bundle; the report text (the files, or why there is no bundle)."""
    if dest.exists():
        return f"{dest}: exists already; no bundle written (nothing overwritten)"
    try:
        manifest = vm.collect_evidence(dest, test_id=item.nodeid)
    except Exception as error:  # a dead VM has no evidence; the test's own error stands
        return f"{dest}: no bundle ({type(error).__name__}: {str(error).splitlines()[0]})"
    lines = [f"{dest}"]
    lines += [f"  {f['name']}  {f['size']} B  sha256 {f['sha256']}" for f in manifest["files"]]
    lines += [f"  note: {note}" for note in manifest["notes"]]
    return "\n".join(lines)
