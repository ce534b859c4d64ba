"""Who owns a domain or volume on the hypervisor, and which ones the reaper removes."""

from __future__ import annotations

import os
import subprocess

from pytest_adare.libvirt_backend.domain_xml import base_volume_name, vm_volume_name
from pytest_adare.libvirt_backend.reaper import (
    Owner,
    host_tag,
    is_orphan,
    new_domain_name,
    owner_of,
    process_alive,
)

HERE = host_tag("ci-runner-1")
SHA = "5bc45d8e816244d500e75b1a858f519efe56242618963e3ccc6f56f3eb7118f8"


def test_a_domain_name_names_its_owner_and_so_do_its_volumes() -> None:
    name = new_domain_name(pid=4242)
    assert owner_of(name) == Owner(host_tag(), 4242)
    assert owner_of(vm_volume_name(name, "overlay")) == Owner(host_tag(), 4242)
    assert owner_of(vm_volume_name(name, "initrd")) == Owner(host_tag(), 4242)
    assert name != new_domain_name(pid=4242)
    assert len(name) <= 64


def test_only_our_hosts_dead_processes_are_orphans() -> None:
    dead = f"adare-{HERE}-77-0badcafe"
    assert is_orphan(dead, HERE, alive=lambda pid: False)
    assert is_orphan(vm_volume_name(dead, "overlay"), HERE, alive=lambda pid: False)
    assert not is_orphan(dead, HERE, alive=lambda pid: True)
    assert not is_orphan(dead, host_tag("another-runner"), alive=lambda pid: False)


def test_base_volumes_and_foreign_names_are_never_orphans() -> None:
    never_alive = lambda pid: False  # noqa: E731
    for name in (
        base_volume_name("disk", SHA), base_volume_name("disk", SHA) + ".done",
        "debian12.qcow2", "adare-vm0-1-2", f"adare-{HERE}-77-0badcafe-notes.txt",
    ):  # fmt: skip
        assert not is_orphan(name, HERE, alive=never_alive), name


def test_process_alive_tells_a_running_process_from_a_finished_one() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen(["true"])
    child.wait()
    assert not process_alive(child.pid)
