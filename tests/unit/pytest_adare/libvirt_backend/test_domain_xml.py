"""The libvirt backend's pure parts: domain, pool, volume and snapshot XML from a frozen
config, the agent's device, and the pool's volume names. Every document is checked
against libvirt's own RelaxNG schemas with ``virt-xml-validate`` when it is installed."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_adare.libvirt_backend.domain_xml import (
    METADATA_NS,
    AgentDevice,
    DomainConfig,
    Uploader,
    agent_device,
    base_volume_name,
    build_domain_xml,
    build_overlay_volume_xml,
    build_pool_xml,
    build_raw_volume_xml,
    build_snapshot_xml,
    done_marker_name,
    is_our_volume,
    uploader_marker_name,
    uploader_of,
    vm_volume_name,
)
from pytest_adare.vm_options import VMOptions

SHA = "5bc45d8e816244d500e75b1a858f519efe56242618963e3ccc6f56f3eb7118f8"
CONFIG = DomainConfig(
    name="adare-vm-123-abcd",
    disk="/var/lib/libvirt/images/adare/adare-vm-123-abcd-overlay.qcow2",
    memory_mib=256,
    kernel="/var/lib/libvirt/images/adare/kernel.img",
    initrd="/var/lib/libvirt/images/adare/initrd.img",
    append="console=ttyS0 quiet root=/dev/vda",
    agent=AgentDevice("serial", "ttyS1"),
    owner_host="ci-runner-7",
    owner_pid=4242,
)


def validate(tmp_path: Path, document: str, kind: str) -> None:
    if shutil.which("virt-xml-validate") is None or shutil.which("xmllint") is None:
        pytest.skip("virt-xml-validate needs libvirt-clients and libxml2-utils (scripts/setup)")
    path = tmp_path / f"{kind}.xml"
    path.write_text(document)
    checked = subprocess.run(
        ["virt-xml-validate", str(path), kind], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_a_direct_boot_domain_has_the_wiring_the_guest_expects(tmp_path: Path) -> None:
    xml = build_domain_xml(CONFIG)
    validate(tmp_path, xml, "domain")
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu"
    assert root.findtext("os/kernel") == CONFIG.kernel
    assert root.findtext("os/cmdline") == "console=ttyS0 quiet root=/dev/vda panic=-1"
    assert [s.find("target").get("port") for s in root.iter("serial")] == ["0", "1"]
    channels = [c.find("target").get("name") for c in root.iter("channel")]
    assert channels == ["org.qemu.guest_agent.0"]
    assert root.find("devices/disk/source").get("file") == CONFIG.disk
    assert {root.findtext(f"on_{event}") for event in ("poweroff", "reboot", "crash")} == {
        "destroy"
    }
    assert root.find("devices/interface") is None
    owner = root.find(f"metadata/{{{METADATA_NS}}}vm")
    assert owner is not None and (owner.get("host"), owner.get("pid")) == ("ci-runner-7", "4242")


def test_a_virtio_agent_port_kvm_network_and_a_clock(tmp_path: Path) -> None:
    config = replace(
        CONFIG, agent=agent_device("/dev/virtio-ports/org.adare.agent.0"), domain_type="kvm",
        network=True, rtc_epoch=1709283600, display=False,
    )  # fmt: skip
    xml = build_domain_xml(config)
    validate(tmp_path, xml, "domain")
    root = ET.fromstring(xml)
    assert root.get("type") == "kvm" and root.find("cpu").get("mode") == "host-passthrough"
    assert [s.find("target").get("port") for s in root.iter("serial")] == ["0"]
    channels = [c.find("target").get("name") for c in root.iter("channel")]
    assert channels == ["org.qemu.guest_agent.0", "org.adare.agent.0"]
    assert root.find("devices/interface").get("type") == "user"
    assert root.find("clock").attrib == {"offset": "absolute", "start": "1709283600"}
    assert root.find("devices/graphics") is None


def test_hostile_text_in_names_and_paths_stays_text() -> None:
    xml = build_domain_xml(replace(CONFIG, append="a'b\"c<d>&e", owner_host="h'<&>\""))
    root = ET.fromstring(xml)
    assert root.findtext("os/cmdline") == "a'b\"c<d>&e panic=-1"
    assert root.find(f"metadata/{{{METADATA_NS}}}vm").get("host") == "h'<&>\""


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "bad name"}, "domain name"),
        ({"domain_type": "xen"}, "domain_type"),
        ({"memory_mib": 32}, "memory_mib"),
        ({"cpus": 0}, "cpus"),
        ({"kernel": None}, "an initrd needs a kernel"),
        ({"disk": "relative.qcow2"}, "absolute path"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(CONFIG, **changes)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (None, None),
        ("/dev/ttyS1", AgentDevice("serial", "ttyS1")),
        ("/dev/virtio-ports/org.adare.agent.0", AgentDevice("channel", "org.adare.agent.0")),
    ],
)
def test_the_agent_device_follows_the_manifest(
    device: str | None, expected: AgentDevice | None
) -> None:
    assert agent_device(device) == expected


@pytest.mark.parametrize(
    "device", ["/dev/ttyS2", "COM2", "/dev/virtio-ports/org.qemu.guest_agent.0",
               "/dev/virtio-ports/a b"],
)  # fmt: skip
def test_an_agent_device_libvirt_cannot_give_is_refused(device: str) -> None:
    with pytest.raises(ValueError, match="libvirt backend gives the agent"):
        agent_device(device)


def test_pool_volume_and_snapshot_documents_are_valid(tmp_path: Path) -> None:
    validate(tmp_path, build_pool_xml("/var/lib/libvirt/images/adare"), "storagepool")
    base = base_volume_name("disk", SHA)
    validate(tmp_path, build_raw_volume_xml(base, 211288064), "storagevol")
    overlay = build_overlay_volume_xml(
        vm_volume_name("adare-vm-1", "overlay"), f"/pool/{base}", "qcow2", 1 << 30
    )
    validate(tmp_path, overlay, "storagevol")
    assert ET.fromstring(overlay).findtext("backingStore/path") == f"/pool/{base}"
    validate(tmp_path, build_snapshot_xml("adare-ready"), "domainsnapshot")


def test_volume_names_are_content_addressed_and_ours() -> None:
    assert base_volume_name("disk", SHA) == f"adare-disk-{SHA}.img"
    assert base_volume_name("kernel", SHA) != base_volume_name("disk", SHA)
    assert done_marker_name(base_volume_name("disk", SHA)) == f"adare-disk-{SHA}.img.done"
    assert vm_volume_name("adare-vm-1", "overlay") == "adare-vm-1-overlay.qcow2"
    assert vm_volume_name("adare-vm-1", "initrd") == "adare-vm-1-initrd.img"
    assert is_our_volume(vm_volume_name("adare-vm-1", "overlay"))
    assert not is_our_volume("debian12.qcow2")
    with pytest.raises(ValueError, match="sha256"):
        base_volume_name("disk", SHA.upper())
    with pytest.raises(ValueError, match="sha256"):
        base_volume_name("disk", "../../etc/passwd")


def test_vm_options_take_a_libvirt_uri_with_the_serial_transport() -> None:
    options = VMOptions(transport="serial", network=False, hypervisor="qemu:///system")
    assert "hypervisor=qemu:///system" in options.describe()
    with pytest.raises(ValueError, match="transport='serial'"):
        VMOptions(hypervisor="qemu:///system")
    with pytest.raises(ValueError, match="libvirt URI"):
        VMOptions(transport="serial", hypervisor="localhost")


def test_an_uploader_marker_names_its_volume_host_and_process() -> None:
    base = base_volume_name("disk", SHA)
    marker = uploader_marker_name(base, "1a2b3c4d", 4242)
    assert uploader_of(marker, base) == Uploader("1a2b3c4d", 4242)
    assert uploader_of(marker, base_volume_name("kernel", SHA)) is None
    assert uploader_of(done_marker_name(base), base) is None
    assert uploader_of(f"{base}.uploader-nothex!-1", base) is None


def test_a_session_machine_names_short_channel_sockets(tmp_path: Path) -> None:
    config = replace(CONFIG, agent=AgentDevice("channel", "adare.agent"),
                     channel_dir="/tmp/adare-lv-x1/channels")  # fmt: skip
    document = build_domain_xml(config)
    validate(tmp_path, document, "domain")
    sources = {
        channel.find("target").get("name"): channel.find("source").get("path")
        for channel in ET.fromstring(document).iter("channel")
    }
    assert sources == {
        "org.qemu.guest_agent.0": "/tmp/adare-lv-x1/channels/org.qemu.guest_agent.0.sock",
        "adare.agent": "/tmp/adare-lv-x1/channels/adare.agent.sock",
    }
    # Without one, libvirt chooses (the system daemon's QEMU user could not bind in ours).
    unnamed = ET.fromstring(build_domain_xml(CONFIG)).find("devices/channel/source")
    assert unnamed is not None and unnamed.get("path") is None


@pytest.mark.parametrize("channel_dir", ["relative/dir", "/" + "d" * 90])
def test_a_channel_dir_that_cannot_hold_a_socket_is_refused(channel_dir: str) -> None:
    with pytest.raises(ValueError, match="channel_dir must be an absolute path"):
        replace(CONFIG, channel_dir=channel_dir)
