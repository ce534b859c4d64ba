"""``--adare-keep``: a failing test's VMs go on running after pytest, in keepers.

When a test's call fails (an assertion, not a broken VM), each VM it used is copied,
as it is at that moment, into a keeper process
(:mod:`pytest_adare.interactive.handover`): the keeper's VM is listed by ``adare-vm
list``, entered with ``adare-vm shell NAME``, stopped by ``adare-vm stop NAME`` or after
``--adare-keep-idle`` minutes unused. Pytest's own VM runs on for the next tests. A VM
that cannot be copied (no migration on its backend, a LAN member, the copy failed)
keeps its disk instead, as before, and the line says why. A kept VM's name carries the
run (``TEST-vm0@RUN``, RUN the pid of pytest, of its controller under xdist), so the VMs
two runs keep never share a name.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from pytest_adare.errors import AdareError
from pytest_adare.plugin.fixtures import ITEM_VMS_KEY, KEEP_HINTS_KEY
from pytest_adare.plugin.options import adare_options
from pytest_adare.plugin.pool import is_infrastructure_error

RUN_KEY = "adare_run"
"""The controller's run label in an xdist worker's ``workerinput``."""


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller: its workers' kept VMs are of this run (this pid)."""
    node.workerinput[RUN_KEY] = str(os.getpid())


def run_label(config: pytest.Config) -> str:
    """This pytest run, as kept VMs' names carry it: its pid, or its xdist controller's."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and isinstance(workerinput.get(RUN_KEY), str):
        return str(workerinput[RUN_KEY])
    return str(os.getpid())


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    options = adare_options(item.config)
    broken = call.excinfo is not None and is_infrastructure_error(call.excinfo.value)
    if report.when != "call" or not report.failed or options.keep == "never" or broken:
        return report
    pooled_vms = item.stash.get(ITEM_VMS_KEY, [])
    if not pooled_vms:
        return report
    # Deferred: the interactive layer only when a failing test's VM is kept.
    from pytest_adare.interactive.handover import hand_over

    hints = item.config.stash.setdefault(KEEP_HINTS_KEY, [])
    for pooled in pooled_vms:
        what = f"{pooled.request.describe()} after {item.nodeid} failed"
        try:
            name = hand_over(
                pooled.vm,
                image=pooled.request.image,
                test_name=item.name,
                owner=f"pytest (pid {os.getpid()}) {item.nodeid}",
                idle_minutes=options.keep_idle,
                run=run_label(item.config),
            )
        except (AdareError, OSError) as error:
            hints.append(f"not kept running: {what}: {str(error).splitlines()[0]}")
            continue
        pooled.kept_running.append(item.nodeid)
        hints.append(
            f"kept running: {what}: adare-vm shell {name}    "
            f"(adare-vm stop {name}; stopped after {options.keep_idle:g} min unused)"
        )
    return report
