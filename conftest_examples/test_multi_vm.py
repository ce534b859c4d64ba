"""Two VMs in one test: the session VM and one more from the factory."""

from pytest_adare import VMFactory
from pytest_adare.vm import VM


def test_two_guests_are_separate_machines(adare_vm: VM, adare_vm_factory: VMFactory) -> None:
    first, second = adare_vm, adare_vm_factory()
    first.guest.shell("echo first > /tmp/who").check()
    second.guest.shell("echo second > /tmp/who").check()

    assert first.guest.shell("cat /tmp/who").stdout == "first\n"
    assert second.guest.shell("cat /tmp/who").stdout == "second\n"
