"""The guest's clock: booted at a scenario date, kept there across a snapshot restore,
dating a snapshot, and set at run time (its own VM: the clock is a boot option)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from image_under_test import image_under_test

from pytest_adare import launch
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

SCENARIO_CLOCK = "2024-03-01T09:00:00Z"


@pytest.fixture(scope="module")
def clocked_vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    manifest = image_under_test()
    with launch(
        manifest.path or manifest.disk,
        clock=SCENARIO_CLOCK,
        workdir=tmp_path_factory.mktemp("vm"),
        progress=None,
    ) as running:
        yield running


def mtime_utc(vm: VM, path: str) -> datetime:
    seconds = int(vm.guest.shell(f"touch {path} && stat -c %Y {path}").check().stdout)
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def test_files_touched_in_the_scenario_carry_its_date_also_after_a_restore(
    clocked_vm: VM,
) -> None:
    assert mtime_utc(clocked_vm, "/root/first").date().isoformat() == "2024-03-01"
    clocked_vm.save_ready("clock-test")
    clocked_vm.guest.shell("sleep 1").check()
    clocked_vm.restore_ready("clock-test")
    assert mtime_utc(clocked_vm, "/root/after-restore").date().isoformat() == "2024-03-01"


def test_a_snapshot_is_dated_by_the_guests_clock(clocked_vm: VM) -> None:
    taken = clocked_vm.guest.fs_snapshot("/root").taken_at_guest
    assert taken is not None, "taken_at_guest is unknown"
    assert datetime.fromtimestamp(taken, tz=timezone.utc).date().isoformat() == "2024-03-01"


def test_set_time_moves_the_guest_clock(clocked_vm: VM) -> None:
    clocked_vm.guest.set_time(datetime(2024, 3, 5, 12, 0, tzinfo=timezone.utc))
    touched = mtime_utc(clocked_vm, "/root/later")
    assert datetime(2024, 3, 5, 12, 0, tzinfo=timezone.utc) <= touched
    assert touched.date().isoformat() == "2024-03-05"
