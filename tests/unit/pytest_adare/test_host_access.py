"""Forwarded ports and shared folders: bad input is refused with the reason before boot,
from the options, the marker and the command line alike; a forward asked of a VM that has
none says so (a running VM's table, on QEMU: tests/e2e/test_port_forward.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_adare import launch
from pytest_adare.host_access import PortSpec, ShareSpec, parse_port, parse_ports, parse_share
from pytest_adare.machine.registry import backend_for
from pytest_adare.machine_tools.port_forward import PortForwardError, PortForwards, forwarded_rows
from pytest_adare.plugin.options import AdareOptions, apply_marker
from pytest_adare.vm_options import VMOptions


@pytest.mark.parametrize(
    ("value", "spec"),
    [(80, PortSpec(80)), ("80", PortSpec(80)), ("5432/tcp", PortSpec(5432)),
     ("53/UDP", PortSpec(53, "udp")), (65535, PortSpec(65535))],
)  # fmt: skip
def test_a_port_is_a_number_with_an_optional_protocol(value: object, spec: PortSpec) -> None:
    assert parse_port(value) == spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "port 0 is out of range (1-65535)"),
        (65536, "port 65536 is out of range (1-65535)"),
        ("-1", "a port is a number or 'PORT/tcp|udp', got '-1'"),
        ("80/sctp", "protocol must be tcp or udp, got 'sctp'"),
        (True, "a port is a number or 'PORT/tcp|udp', got True"),
        (8.5, "a port is a number or 'PORT/tcp|udp', got 8.5"),
        ("http", "a port is a number or 'PORT/tcp|udp', got 'http'"),
    ],
)
def test_a_bad_port_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_port(value)


def test_a_port_given_twice_is_refused_but_tcp_and_udp_of_one_number_are_two() -> None:
    with pytest.raises(ValueError, match="port 80/tcp is forwarded twice"):
        parse_ports([80, "80/tcp"])
    assert parse_ports("53/tcp, 53/udp") == (PortSpec(53), PortSpec(53, "udp"))


def test_the_options_refuse_ports_where_no_forward_can_be_made() -> None:
    with pytest.raises(ValueError, match="ports: forwarded guest ports: not supported on the "
                       "libvirt backend"):  # fmt: skip
        backend_for(VMOptions.from_given(
            {"hypervisor": "qemu:///system", "network": True, "ports": [80]}
        ))  # fmt: skip
    with pytest.raises(ValueError, match=r"need the user-mode network card \(network=True; "):
        VMOptions.from_given({"transport": "serial", "ports": [80]})
    assert VMOptions.from_given({"ports": [80, "53/udp"]}).ports == (
        PortSpec(80), PortSpec(53, "udp"),
    )  # fmt: skip


def test_ports_from_the_marker_make_their_own_vm_and_bad_ones_name_the_argument() -> None:
    options = AdareOptions(vm="debian")
    marked = apply_marker(options, pytest.mark.adare_vm(ports=[8080]).mark)
    assert marked.options.ports == (PortSpec(8080),)
    assert marked.vm_key != apply_marker(options, None).vm_key
    with pytest.raises(ValueError, match=r"adare_vm marker: ports: port 70000 is out of range"):
        apply_marker(options, pytest.mark.adare_vm(ports=[70000]).mark)


def test_a_writable_share_is_refused_with_snapshot_isolation_naming_the_choices(
    tmp_path: Path,
) -> None:
    options = AdareOptions(vm="debian")
    writable = pytest.mark.adare_vm(share={str(tmp_path): "/src:rw"})
    with pytest.raises(ValueError, match=r"cannot be rolled back between tests .*'reboot' or"):
        apply_marker(options, writable.mark)
    for isolation in ("reboot", "none"):
        marked = apply_marker(options, pytest.mark.adare_vm(share={str(tmp_path): "/src:rw"},
                                                            isolation=isolation).mark)  # fmt: skip
        assert marked.options.share[0].writable and marked.isolation == isolation
    assert apply_marker(options, pytest.mark.adare_vm(share={str(tmp_path): "/src"}).mark)


def test_a_bad_ports_flag_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("--adare-ports=80,80")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --adare-ports: port 80/tcp is forwarded twice"])


def test_a_forward_before_the_vm_started_says_so() -> None:
    with pytest.raises(PortForwardError, match="cannot forward guest port 80/tcp: the VM has "
                       "not started"):  # fmt: skip
        asyncio.run(PortForwards().add(80))
    with pytest.raises(PortForwardError, match=r"8080/tcp is not forwarded \(forwarded: none\)"):
        PortForwards().get(8080)


def test_forwarded_rows_read_only_loopback_forwards_of_info_usernet() -> None:
    text = (
        "  TCP[HOST_FORWARD]  11       127.0.0.1 42899       10.0.2.15    80     0     0\n"
        "  TCP[ESTABLISHED]   85       127.0.0.1 39473       10.0.2.15 18765     0     0\n"
        "  UDP[HOST_FORWARD]   9         0.0.0.0 52797       10.0.2.15    53     0     0\n"
    )
    assert forwarded_rows(text) == {("tcp", 42899, 80)}


def test_a_share_is_a_host_directory_and_an_absolute_guest_path(tmp_path: Path) -> None:
    assert parse_share({str(tmp_path): "/src"}) == (ShareSpec(str(tmp_path.resolve()), "/src"),)
    assert parse_share(f"{tmp_path}:/src:ro") == (ShareSpec(str(tmp_path.resolve()), "/src"),)
    writable = ShareSpec(str(tmp_path.resolve()), "/src", writable=True)
    assert parse_share({str(tmp_path): "/src:rw"}) == (writable,)
    assert parse_share(f"{tmp_path}:/src:rw") == (writable,)
    assert str(writable) == f"{tmp_path.resolve()}:/src:rw"


@pytest.mark.parametrize(
    ("guest_path", "message"),
    [
        ("src", "the guest path 'src' is not absolute"),
        ("/", "the guest path '/' must be a directory below /"),
        ("/src/../etc", "must be a directory below /"),
        ("/my src", "paths may not hold spaces, commas or newlines"),
        ("/src:wx", "the mode is ro or rw, got 'wx'"),
    ],
)
def test_a_bad_guest_path_or_mode_is_refused_naming_it(
    tmp_path: Path, guest_path: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_share({str(tmp_path): guest_path})


def test_a_host_path_that_is_missing_or_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"the host path '.*/missing' does not exist"):
        parse_share({str(tmp_path / "missing"): "/src"})
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"the host path '.*/file' is not a directory"):
        parse_share(f"{tmp_path / 'file'}:/src")
    with pytest.raises(ValueError, match="two host folders at the guest path /src"):
        parse_share(f"{tmp_path}:/src,{tmp_path}:/src")


def test_launch_refuses_a_bad_port_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"port 0 is out of range"):
        with launch("debian", workdir=tmp_path / "vm", ports=(0,)):  # type: ignore[arg-type]
            pass
    assert not (tmp_path / "vm").exists()  # no workdir: nothing was started


def test_launch_refuses_a_bad_share_before_anything_starts(tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    with pytest.raises(ValueError, match="does not exist"):
        missing = {str(tmp_path / "no"): "/src"}
        with launch("debian", workdir=tmp_path / "vm", share=missing):  # type: ignore[arg-type]
            pass
    assert set(tmp_path.iterdir()) == before  # no workdir: nothing was started
    with pytest.raises(ValueError, match="share: a shared folder: not supported on the libvirt"):
        with launch("debian", hypervisor="qemu:///system", share={str(tmp_path): "/s"}):
            pass


def test_a_bad_share_flag_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("--adare-share=missing-dir:/src")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --adare-share: share: the host path 'missing-dir' *"])
