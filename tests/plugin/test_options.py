"""Options, ini keys, the marker and skip logic: everything that needs no VM."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_adare.plugin.hypervisors import (
    assign_hypervisor,
    parse_hypervisors,
    workers_per_host,
)
from pytest_adare.plugin.options import AdareOptions, apply_marker, parse_memory

VM_TESTS = """
import pytest

def test_uses_guest(guest):
    pass

def test_uses_session_vm(adare_vm):
    pass

def test_uses_factory(adare_vm_factory):
    pass

@pytest.mark.asyncio
async def test_uses_async_guest(async_guest):
    pass

@pytest.mark.adare_vm(gui=True)
def test_marked_only():
    pass

def test_plain():
    pass
"""

NO_IMAGE = "needs a VM image: pass --adare-vm=IMAGE"


def test_without_image_every_vm_test_skips_with_one_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(VM_TESTS)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=5)
    skip_lines = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert sum(int(line.split("[")[1].split("]")[0]) for line in skip_lines) == 5
    assert all(NO_IMAGE in line for line in skip_lines)
    result.stdout.fnmatch_lines(["adare: no --adare-vm given*"])


def test_ini_image_counts_as_given(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nadare_vm = debian\nadare_isolation = none\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["adare: image debian, accel auto (*), isolation none, *"])


def test_command_line_wins_over_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nadare_vm = debian\nadare_isolation = none\nadare_accel = kvm\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest(
        "--adare-isolation=reboot", "--adare-accel=tcg", "--adare-vm=debian-desktop"
    )
    result.stdout.fnmatch_lines(["adare: image debian-desktop, accel tcg, isolation reboot, *"])


def test_ini_paths_are_relative_to_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.mkdir("images")
    pytester.makeini("[pytest]\nadare_vm = images/mine.qcow2\nadare_artifacts = out\n")
    pytester.makepyfile(
        """
        from pytest_adare.plugin import adare_options

        def test_paths(pytestconfig):
            options = adare_options(pytestconfig)
            assert options.vm == str(pytestconfig.rootpath / "images" / "mine.qcow2")
            assert options.artifacts == pytestconfig.rootpath / "out"
        """
    )
    pytester.mkdir("sub")
    result = pytester.runpytest(pytester.path, "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("isolation", "fast", "'fast' is not one of snapshot, none, reboot"),
        ("accel", "hvf", "'hvf' is not one of auto, kvm, tcg"),
        ("transport", "usb", "'usb' is not one of websocket, serial"),
        ("gui", "vnc", "'vnc' is not one of auto, agent, host"),
        ("firmware", "coreboot", "'coreboot' is not one of auto, bios, uefi"),
        ("keep", "sometimes", "'sometimes' is not one of never, on-failure, always"),
        ("memory", "lots", "expected a memory size in MiB like 1024, 512M or 2G, got 'lots'"),
        ("memory", "16", "16 MiB is too little memory*"),
        ("cpus", "two", "expected a number of CPUs, got 'two'"),
        ("cpus", "0", "expected at least 1 CPU, got '0'"),
        ("ready-command", " ", "must be a non-empty shell command, got ' '"),
        ("boot-timeout", "-1", "expected a positive number of seconds, got '-1'"),
    ],
)
def test_bad_values_are_usage_errors(
    pytester: pytest.Pytester, flag: str, value: str, message: str
) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest(f"--adare-{flag}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --adare-{flag}: {message}"])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nadare_keep = maybe\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini key adare_keep: 'maybe' is not one of never, *"])


def test_marker_is_registered_with_its_arguments(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.adare_vm(image=None, images=None, gui=None, os=None, *"]
    )


def test_marker_passes_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.adare_vm(memory="1G")
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(skipped=1)


def test_bad_marker_argument_errors_before_any_vm_starts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.adare_vm(colour="red")
        def test_marked(guest):
            pass

        @pytest.mark.adare_vm(isolation="sometimes")
        def test_bad_isolation(guest):
            pass
        """
    )
    result = pytester.runpytest("--adare-vm=debian")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*adare_vm marker: unknown argument(s) colour; known: image, images, gui, os, *",
            "*adare_vm marker: isolation: 'sometimes' is not one of snapshot, none, reboot*",
        ]
    )


@pytest.mark.parametrize(
    ("text", "mib"),
    [("1024", 1024), ("512M", 512), ("512MiB", 512), ("2G", 2048), ("2gib", 2048), (768, 768)],
)
def test_memory_sizes(text: str | int, mib: int) -> None:
    assert parse_memory(text, "--adare-memory") == mib


def test_marker_overrides_the_session_options() -> None:
    options = AdareOptions(vm="debian", isolation="snapshot", given={"memory_mib": 512})
    mark = pytest.mark.adare_vm(memory="1G", isolation="none", gui="host", os="linux").mark
    request = apply_marker(options, mark)
    assert (request.options.memory_mib, request.isolation, request.options.gui) == (
        1024,
        "none",
        "host",
    )
    assert request.needs_desktop and request.needs_os == "linux"
    assert request.vm_key != apply_marker(options, None).vm_key


def test_firmware_from_the_command_line_or_the_marker_makes_its_own_vm() -> None:
    options = AdareOptions(vm="disk.qcow2", given={"firmware": "uefi"})
    assert apply_marker(options, None).options.firmware == "uefi"
    marked = apply_marker(options, pytest.mark.adare_vm(firmware="bios").mark)
    assert marked.options.firmware == "bios"
    assert marked.vm_key != apply_marker(options, None).vm_key
    with pytest.raises(ValueError, match="firmware: 'efi' is not one of auto, bios, uefi"):
        apply_marker(options, pytest.mark.adare_vm(firmware="efi").mark)


def test_a_ready_command_from_the_options_or_the_marker_makes_its_own_vm() -> None:
    options = AdareOptions(vm="disk.qcow2", given={"ready_command": "test -e /run/app.ready"})
    session = apply_marker(options, None)
    assert session.options.ready_command == "test -e /run/app.ready"
    marked = apply_marker(options, pytest.mark.adare_vm(ready_command="pgrep app").mark)
    assert marked.options.ready_command == "pgrep app"
    assert marked.vm_key != session.vm_key
    assert apply_marker(AdareOptions(vm="x"), None).options.ready_command is None
    with pytest.raises(ValueError, match="ready_command: must be a non-empty shell command"):
        apply_marker(options, pytest.mark.adare_vm(ready_command="").mark)


def test_the_ready_command_comes_from_the_command_line_or_the_ini(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nadare_ready_command = systemctl is-active app\n")
    pytester.makepyfile(
        """
        from pytest_adare.plugin.options import adare_options

        def test_command(pytestconfig):
            print("READY=" + repr(adare_options(pytestconfig).session_vm.ready_command))
        """
    )
    pytester.runpytest("-s").stdout.fnmatch_lines(["*READY='systemctl is-active app'"])
    result = pytester.runpytest("-s", "--adare-ready-command=test -e /tmp/x")
    result.stdout.fnmatch_lines(["*READY='test -e /tmp/x'"])


def test_isolation_alone_shares_the_session_vm() -> None:
    options = AdareOptions(vm="debian")
    marked = apply_marker(options, pytest.mark.adare_vm(isolation="reboot").mark)
    assert marked.vm_key == apply_marker(options, None).vm_key


def test_serial_transport_means_no_network_unless_asked() -> None:
    options = AdareOptions(vm="debian", given={"transport": "serial"})
    assert apply_marker(options, None).options.network is False
    marked = apply_marker(options, pytest.mark.adare_vm(network=True).mark)
    assert marked.options.network is True


def test_a_hypervisor_uri_runs_the_vm_there_over_the_serial_link() -> None:
    options = AdareOptions(vm="debian", given={"hypervisor": "qemu:///system"})
    session = apply_marker(options, None).options
    assert (session.hypervisor, session.transport, session.network) == (
        "qemu:///system", "serial", False,
    )  # fmt: skip
    local = apply_marker(options, pytest.mark.adare_vm(hypervisor=None).mark)
    assert local.options.hypervisor is None and local.options.transport == "websocket"
    remote = apply_marker(
        AdareOptions(vm="debian"), pytest.mark.adare_vm(hypervisor="qemu+ssh://root@h/system").mark
    )
    assert remote.options.hypervisor == "qemu+ssh://root@h/system"
    assert remote.vm_key != apply_marker(options, None).vm_key
    with pytest.raises(ValueError, match="transport='serial'"):
        apply_marker(options, pytest.mark.adare_vm(transport="websocket").mark)


def test_the_hypervisor_comes_from_the_command_line_or_the_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nadare_hypervisor = qemu:///session\n")
    pytester.makepyfile(
        """
        from pytest_adare.plugin.options import adare_options

        def test_uri(pytestconfig):
            print("URI", adare_options(pytestconfig).hypervisor)
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.stdout.fnmatch_lines(["*URI qemu:///session*"])
    result = pytester.runpytest_subprocess("-s", "--adare-hypervisor=qemu:///system")
    result.stdout.fnmatch_lines(["*URI qemu:///system*"])


def test_several_hypervisors_spread_the_workers_within_the_limit(tmp_path: Path) -> None:
    uris = parse_hypervisors("qemu:///system, qemu+ssh://ci@hv2/system", tmp_path, "flag")
    assert uris == ("qemu:///system", "qemu+ssh://ci@hv2/system")
    assert [assign_hypervisor(uris, worker, 4, 2) for worker in range(4)] == [*uris, *uris]
    assert assign_hypervisor(uris, None, None, 1) == "qemu:///system"
    assert workers_per_host(uris, 3) == {"qemu:///system": 2, "qemu+ssh://ci@hv2/system": 1}
    with pytest.raises(pytest.UsageError, match="-n 3 needs 3 VM slots, but 2 hypervisor"):
        assign_hypervisor(uris, 0, 3, 1)
    hosts = "# the lab\nqemu+ssh://a/system\n\nqemu+ssh://b/system # b\n"
    (tmp_path / "hosts.txt").write_text(hosts)
    assert parse_hypervisors("@hosts.txt", tmp_path, "flag") == (
        "qemu+ssh://a/system", "qemu+ssh://b/system",
    )  # fmt: skip
    for bad in ("", "qemu:///system,localhost", "@missing.txt"):
        with pytest.raises(pytest.UsageError, match="flag"):
            parse_hypervisors(bad, tmp_path, "flag")


def test_more_workers_than_hypervisor_slots_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-n", "3", "--adare-hypervisor=qemu:///system,qemu:///session",
        "--adare-hypervisor-limit=1",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*-n 3 needs 3 VM slots, but 2 hypervisor(s) x *limit=1 give 2*"])


STACKED_MARKERS = """
import pytest
from pytest_adare.plugin.fixtures import marker_request

pytestmark = pytest.mark.adare_vm(image="debian", memory="1G", cpus=2)

@pytest.mark.adare_vm(cpus=3)
class TestStacked:
    @pytest.mark.adare_vm(isolation="none")         # keep the previous test's state
    @pytest.mark.adare_vm(warm="off")               # its own VM, always booted cold
    def test_sees_previous_state(self, request):
        vm = marker_request(request)
        print("GOT", vm.image, vm.isolation, vm.options.warm, vm.options.memory_mib,
              vm.options.cpus)
"""


def test_stacked_markers_combine_the_closest_winning_per_argument(
    pytester: pytest.Pytester,
) -> None:
    # docs/plugin.md's stacked example, on a class and a module that carry markers too;
    # no --adare-vm: the module's image= counts, so the test is not skipped either.
    pytester.makepyfile(STACKED_MARKERS)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*GOT debian none off 1024 3"])


def test_an_option_defined_once_reaches_the_vm_from_flag_ini_and_marker(
    pytester: pytest.Pytester,
) -> None:
    # desktop_timeout was added as one VMOptions field: flag, ini key and marker follow.
    pytester.makeini("[pytest]\nadare_vm = debian\nadare_boot_timeout = 90\n")
    pytester.makepyfile(
        """
        import pytest
        from pytest_adare.plugin.fixtures import marker_request

        @pytest.mark.adare_vm(desktop_timeout=45)
        def test_timeouts(request):
            vm = marker_request(request).options
            print("TIMEOUTS", vm.boot_timeout, vm.desktop_timeout)
        """
    )
    result = pytester.runpytest("-s", "--adare-desktop-timeout=30")
    result.stdout.fnmatch_lines(["*TIMEOUTS 90.0 45.0"])


def test_a_combination_the_vm_cannot_take_is_a_usage_error_naming_the_flags(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("--adare-hypervisor=qemu:///system", "--adare-transport=websocket")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --adare-transport, --adare-hypervisor: *serial*"])
