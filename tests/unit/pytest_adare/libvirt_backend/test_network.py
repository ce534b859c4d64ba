"""LANs on the libvirt backend without a daemon: the isolated network's XML, a member's
LAN NIC in its domain, its link-state document, and the network's name that the reaper
reads. Documents are checked with libvirt's schemas when ``virt-xml-validate`` is here."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_adare.lan.port import lan_port
from pytest_adare.libvirt_backend.domain_xml import (
    build_domain_xml,
    build_network_xml,
    lan_interface_xml,
)
from pytest_adare.libvirt_backend.reaper import (
    Owner,
    host_tag,
    is_orphan,
    new_network_name,
    owner_of,
)
from tests.unit.pytest_adare.libvirt_backend.test_domain_xml import CONFIG, validate

NETWORK = new_network_name(0, pid=4242)


def test_a_lan_network_is_isolated_no_forward_no_address_no_dhcp(tmp_path: Path) -> None:
    xml = build_network_xml(NETWORK)
    validate(tmp_path, xml, "network")
    root = ET.fromstring(xml)
    assert root.findtext("name") == NETWORK
    assert root.find("forward") is None and root.find("ip") is None
    assert root.find("bridge").attrib == {"stp": "off", "delay": "0"}


def test_a_member_has_one_network_nic_per_lan_in_its_pci_slot(tmp_path: Path) -> None:
    ports = (lan_port(0, "02:aa:bb:cc:00:01", network=NETWORK),
             lan_port(1, "02:aa:bb:cc:01:01", network=new_network_name(1)))  # fmt: skip
    xml = build_domain_xml(replace(CONFIG, lan_ports=ports))
    validate(tmp_path, xml, "domain")
    nics = ET.fromstring(xml).findall("devices/interface")
    assert [nic.get("type") for nic in nics] == ["network", "network"]
    assert [nic.find("source").get("network") for nic in nics] == [p.network for p in ports]
    assert [nic.find("mac").get("address") for nic in nics] == [p.mac for p in ports]
    assert [nic.find("address").get("slot") for nic in nics] == ["0x10", "0x11"]
    assert [nic.find("alias").get("name") for nic in nics] == ["ua-lan0", "ua-lan1"]
    assert all(nic.find("link") is None for nic in nics)


def test_the_link_state_document_names_the_nic_by_its_mac() -> None:
    port = lan_port(0, "02:aa:bb:cc:00:01", network=NETWORK)
    down = ET.fromstring(lan_interface_xml(port, link_up=False))
    up = ET.fromstring(lan_interface_xml(port, link_up=True))
    assert (down.find("link").get("state"), up.find("link").get("state")) == ("down", "up")
    assert down.find("mac").get("address") == port.mac


def test_a_nic_on_no_libvirt_network_and_a_bad_network_name_are_refused() -> None:
    socket_port = lan_port(0, "02:aa:bb:cc:00:01", socket="/tmp/m0", peer="/tmp/f0")
    with pytest.raises(ValueError, match="names no libvirt network"):
        replace(CONFIG, lan_ports=(socket_port,))
    with pytest.raises(ValueError, match="network name"):
        build_network_xml("bad name/")


def test_a_lan_network_names_the_run_that_owns_it() -> None:
    assert owner_of(NETWORK) == Owner(host_tag(), 4242)
    assert NETWORK.endswith("-lan0") and len(NETWORK) <= 64
    here = host_tag()
    assert is_orphan(NETWORK, here, alive=lambda pid: False)
    assert not is_orphan(NETWORK, here, alive=lambda pid: True)
    assert not is_orphan(NETWORK, host_tag("another-runner"), alive=lambda pid: False)
    for foreign in ("default", f"{NETWORK}x", f"{NETWORK}-notes"):
        assert not is_orphan(foreign, here, alive=lambda pid: False), foreign
