"""The built-in ``debian-systemd`` image: Debian's systemd as PID 1, the adare agent and
qemu-ga as units, the vocabulary of a systemd guest (``wait_for_unit``, ``journal``) and
the journal a real install keeps on its disk, read back from an exported disk with
e2fsprogs' ``debugfs``.

One VM for the module (built on first use; ``scripts/test`` builds it beside the checks),
and one of a recipe on it: nginx as Debian ships it (``data/nginx-systemd.toml``), whose
own unit starts it at boot, and the recipe's own unit, enabled by its ``services``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from pytest_adare import AdareError, launch
from pytest_adare.vm import VM

pytestmark = pytest.mark.e2e

IMAGE = os.environ.get("ADARE_TEST_SYSTEMD_IMAGE") or "debian-systemd"
NGINX = Path(__file__).parent / "data/nginx-systemd.toml"
WAIT = 90.0


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    with launch(IMAGE, workdir=tmp_path_factory.mktemp("vm"), progress=None) as running:
        yield running


def test_pid_1_is_systemd_and_the_boot_finished_cleanly(vm: VM) -> None:
    assert vm.guest.succeed("cat /proc/1/comm").strip() == "systemd"
    # The ready phase waited for is-system-running; nothing may have failed on the way.
    state = vm.guest.shell("systemctl is-system-running").stdout.strip()
    failed = vm.guest.shell("systemctl list-units --state=failed --no-legend --plain").stdout
    assert (state, failed.strip()) == ("running", "")


def test_the_agent_and_qemu_ga_run_as_units(vm: VM) -> None:
    for unit in ("adare-agent.service", "qemu-guest-agent.service", "systemd-journald.service"):
        vm.guest.wait_for_unit(unit, timeout=WAIT)
    agent_pid = vm.guest.succeed("systemctl show -p MainPID --value adare-agent.service")
    cgroup = vm.guest.succeed(f"cat /proc/{agent_pid.strip()}/cgroup")
    assert "adare-agent.service" in cgroup
    # logind answers (D-Bus activated on first use, as on an install).
    vm.guest.succeed("loginctl list-sessions --no-legend")
    vm.guest.wait_for_unit("systemd-logind.service", timeout=WAIT)


def test_wait_for_unit_waits_for_a_unit_that_starts_later(vm: VM) -> None:
    vm.guest.succeed("systemd-run --unit=adare-late --on-active=3 sleep 600")
    assert vm.guest.shell("systemctl is-active adare-late.service").stdout.strip() != "active"
    vm.guest.wait_for_unit("adare-late.service", timeout=WAIT)
    assert vm.guest.succeed("systemctl is-active adare-late.service").strip() == "active"


def test_a_failed_unit_fails_the_wait_with_its_status_and_journal(vm: VM) -> None:
    token = secrets.token_hex(6)
    vm.guest.succeed(f"systemd-run --unit=adare-fails sh -c 'echo broken-{token} >&2; exit 3'")
    with pytest.raises(AdareError, match=r"the unit adare-fails\.service failed") as failure:
        vm.guest.wait_for_unit("adare-fails.service", timeout=WAIT)
    assert "status=3" in str(failure.value) and f"broken-{token}" in str(failure.value)
    entries = vm.guest.journal(unit="adare-fails.service")
    assert f"broken-{token}" in [entry.message for entry in entries]


def test_journal_returns_parsed_entries_since_a_time(vm: VM) -> None:
    started = vm.guest.now()
    token = secrets.token_hex(6)
    vm.guest.succeed(f"logger -t adare-test -p user.warning hello-{token}")
    entries = vm.guest.journal(identifier="adare-test", since=started)
    mine = [entry for entry in entries if entry.message == f"hello-{token}"]
    assert len(mine) == 1, entries
    entry = mine[0]
    assert (entry.identifier, entry.priority) == ("adare-test", 4)
    assert entry.timestamp >= started - timedelta(seconds=1)
    assert entry.boot_id == vm.guest.succeed("cat /proc/sys/kernel/random/boot_id").strip().replace(
        "-", ""
    )
    # Nothing of the boot is "since" this test's start; a limit keeps the newest.
    assert all(e.timestamp >= started - timedelta(seconds=1) for e in entries)
    newest = vm.guest.journal(limit=3)
    assert len(newest) == 3 and newest == sorted(newest, key=lambda e: e.timestamp)


def test_the_journal_is_on_the_disk_an_examiner_exports(vm: VM, tmp_path: Path) -> None:
    token = secrets.token_hex(6)
    vm.guest.succeed(f"logger -t adare-disk disk-{token} && journalctl --flush --sync")
    machine_id = vm.guest.succeed("cat /etc/machine-id").strip()
    disk = tmp_path / "disk.raw"
    vm.export_disk(disk)
    listing = subprocess.run(
        ["debugfs", "-R", f"ls -l /var/log/journal/{machine_id}", str(disk)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert "system.journal" in listing, listing
    dumped = tmp_path / "system.journal"
    subprocess.run(
        ["debugfs", "-R", f"dump /var/log/journal/{machine_id}/system.journal {dumped}",
         str(disk)],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    assert f"disk-{token}".encode() in dumped.read_bytes()


# docs/forensics.md, "The agent's footprint": what the harness's own calls add to the
# journal of a systemd guest (identifier, message). Everything else is the scenario's.
JOURNAL_FOOTPRINT = {("qemu-ga", "info: guest-fsfreeze called")}


def test_the_harness_calls_add_only_the_documented_lines_to_the_journal(
    vm: VM, tmp_path: Path
) -> None:
    guest = vm.guest
    since = guest.now()
    guest.succeed("true")
    guest.user.run("id").check()
    guest.fs_snapshot("/etc")
    (tmp_path / "note.txt").write_text("a note\n")
    guest.push(tmp_path / "note.txt", "/root/note.txt")
    guest.pull("/etc/hostname", tmp_path / "hostname")
    guest.journal(limit=5)
    vm.export_disk(tmp_path / "disk.raw")
    # The guest's own timers (apt-daily, dpkg-db-backup, ...) may fire meanwhile: theirs.
    timers = guest.succeed("systemctl list-timers --all --no-legend --plain")
    scheduled = {line.split()[-1] for line in timers.splitlines() if line.strip()}
    added = {
        (e.identifier, e.message) for e in guest.journal(since=since, limit=1000)
        if e.unit not in scheduled and not any(unit in e.message for unit in scheduled)
    }  # fmt: skip
    assert added == JOURNAL_FOOTPRINT


def test_a_recipes_services_start_from_their_units(tmp_path: Path) -> None:
    with launch(NGINX, workdir=tmp_path / "vm", progress=None) as web:
        web.guest.wait_for_unit("nginx.service", timeout=WAIT)
        page = web.guest.wait_until_succeeds("wget -q -O - http://127.0.0.1/", timeout=WAIT)
        assert "Welcome to nginx" in page.stdout
        enabled = web.guest.succeed("systemctl is-enabled nginx.service").strip()
        assert enabled == "enabled"
        started = [e.message for e in web.guest.journal(unit="nginx.service")]
        assert any("Started nginx.service" in message for message in started), started
        # The recipe's own unit: copied in, enabled by `services`, started by systemd.
        web.guest.wait_for_unit("report-server.service", timeout=WAIT)
        report = web.guest.wait_until_succeeds("wget -q -O - http://127.0.0.1:8081/",
                                               timeout=WAIT)  # fmt: skip
        assert "Quarterly report: numbers 1 2 3" in report.stdout
        assert web.guest.succeed("systemctl is-enabled report-server.service").strip() == "enabled"
        wants = web.guest.succeed("readlink /etc/systemd/system/multi-user.target.wants/"
                                  "report-server.service").strip()  # fmt: skip
        assert wants == "/etc/systemd/system/report-server.service"
