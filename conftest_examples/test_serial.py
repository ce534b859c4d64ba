"""Network-less scenario: the agent answers over the serial link, the VM has no NIC."""

import pytest

from pytest_adare.guest import Guest


@pytest.mark.adare_vm(transport="serial")
def test_agent_works_without_any_network(guest: Guest) -> None:
    interfaces = guest.shell("ls /sys/class/net").stdout.split()
    assert interfaces == ["lo"]
    assert guest.shell("echo over serial").stdout == "over serial\n"
