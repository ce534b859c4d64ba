"""``--adare-pause-on-fail`` and ``guest.breakpoint()``: pause a test with its VMs alive.

Both follow one rule (:func:`~pytest_adare.interactive.pause.pause_problem`): pausing
needs a terminal to wait for Enter on, and is refused under xdist (``-n``: workers have
no terminal and one paused worker would hold the run) and in CI (``CI=true``: a
pseudo-terminal, perhaps, but nobody at it). The option is checked at start-up (a usage
error); ``guest.breakpoint()`` where it cannot pause fails the test saying why instead
of waiting forever. A failing test pauses in its call report, before any teardown, and
after every other part of the report is made (the screenshot, the film, the checks: they
show the failure, not what one did while paused); with ``-x`` the pause comes before the
stop and with ``--pdb`` before the debugger (the VM is alive in both). The heavy part
(:mod:`pytest_adare.interactive.pause`) is imported only then.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

from pytest_adare.plugin.fixtures import ITEM_VMS_KEY
from pytest_adare.plugin.options import adare_options


def _xdist(config: pytest.Config) -> bool:
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) or hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not adare_options(config).pause_on_fail:
        return
    # Deferred: the interactive layer is only needed when pausing is asked for.
    from pytest_adare.interactive.pause import pause_problem

    problem = pause_problem(xdist=_xdist(config))
    if problem is not None:
        raise pytest.UsageError(f"--adare-pause-on-fail {problem}")


def _owner(item: pytest.Item) -> str:
    return f"pytest (pid {os.getpid()}) {item.nodeid}"


# tryfirst: the outermost wrapper, so the pause comes once every other wrapper made its
# part of the report (evidence, film, soft checks, xfail) and sees the final outcome.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed and adare_options(item.config).pause_on_fail:
        vms = [pooled.vm for pooled in item.stash.get(ITEM_VMS_KEY, [])]
        if vms:
            # Deferred: the interactive layer only when a test pauses.
            from pytest_adare.interactive.pause import pause_vms

            pause_vms(vms, test_name=item.name, why=f"{item.nodeid} failed", owner=_owner(item))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield
    # After the fixtures: the facade is loaded iff this test has a guest (loading it here
    # would cost every run PIL and more). ``guest.breakpoint()`` then pauses through us.
    facade = sys.modules.get("pytest_adare.guest")
    if facade is None:
        return

    def breakpoint_here(guest: Any) -> None:
        # Deferred: the interactive layer only when a test pauses.
        from pytest_adare.interactive.pause import NoTerminal, pause_guest, pause_problem

        problem = pause_problem(xdist=_xdist(item.config))
        if problem is not None:
            raise NoTerminal(f"guest.breakpoint() {problem}")
        pause_guest(guest, test_name=item.name, owner=_owner(item))

    facade.set_breakpoint_hook(breakpoint_here)
