"""VMOptions: each option is one field, and what is made from the fields agrees with them."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest

from pytest_adare.launch import launch
from pytest_adare.plugin.options import MARKER_KEYS, option_specs
from pytest_adare.vm_options import LAUNCH_INPUT_TYPES, LaunchOptions, VMOptions, option_fields


def test_launch_takes_exactly_the_fields_exposed_to_launch_with_their_types() -> None:
    # LaunchOptions is the one hand-written list (mypy needs it); it must equal the fields.
    exposed = {o.field: o.annotation for o in option_fields() if o.exposed("launch")}
    assert get_type_hints(LaunchOptions) == {**exposed, **LAUNCH_INPUT_TYPES}
    assert set(LAUNCH_INPUT_TYPES) <= set(exposed)
    kinds = {p.kind for p in inspect.signature(launch).parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD in kinds


def test_launch_refuses_a_keyword_that_is_not_a_launch_option_before_anything_starts() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*install"):
        with launch("no-such-image", install="qga"):  # type: ignore[call-arg]
            pass


def test_every_exposed_field_has_a_flag_or_a_marker_key() -> None:
    flags = {spec.vm_field for spec in option_specs() if spec.vm_field}
    assert flags == {o.field for o in option_fields() if o.exposed("cli")}
    markers = {o.name for o in option_fields() if o.exposed("marker")}
    assert markers <= set(MARKER_KEYS)
    assert set(MARKER_KEYS) - markers == {"image", "images", "os", "isolation"}


def test_a_hypervisor_defaults_the_transport_to_serial_and_serial_to_no_network() -> None:
    remote = VMOptions.from_given({"hypervisor": "qemu:///system"})
    assert (remote.transport, remote.network) == ("serial", False)
    serial = VMOptions.from_given({"transport": "serial"})
    assert serial.network is False
    assert VMOptions.from_given({"transport": "serial", "network": True}).network is True
    assert VMOptions.from_given({}) == VMOptions()
    with pytest.raises(ValueError, match="use transport='serial'"):
        VMOptions.from_given({"hypervisor": "qemu:///system", "transport": "websocket"})
    with pytest.raises(ValueError, match="unknown VM option"):
        VMOptions.from_given({"colour": "red"})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("memory", "lots", "expected a memory size in MiB like 1024, 512M or 2G, got 'lots'"),
        ("cpus", True, "expected a number of CPUs, got True"),
        ("boot_timeout", "0", "expected a positive number of seconds, got '0'"),
        ("accel", "hvf", "'hvf' is not one of auto, kvm, tcg"),
        ("clock", 1709283600, "expected an ISO 8601 string, got 1709283600"),
        ("network", "maybe", "expected true or false, got 'maybe'"),
    ],
)
def test_each_parser_says_what_it_expected(name: str, value: object, message: str) -> None:
    option = {o.name: o for o in option_fields()}[name]
    with pytest.raises(ValueError) as error:
        option.parse(value)
    assert str(error.value) == message


def test_describe_names_what_differs_from_the_defaults() -> None:
    options = VMOptions(memory_mib=512, boot_timeout=30.0, ready_command="pgrep app")
    assert options.describe() == (
        "accel=auto transport=websocket memory=512M boot_timeout=30.0 ready_command='pgrep app'"
    )


def test_what_a_user_writes_for_ports_and_share_type_checks(tmp_path: Path) -> None:
    # ports=[80, "53/udp"] and share={"./": "/src"} as the docs write them, under
    # mypy --strict (they were "list[object]" against "tuple[PortSpec, ...]").
    script = tmp_path / "scenario.py"
    script.write_text(
        "from pytest_adare import launch\n"
        'with launch("debian", ports=[80, "53/udp"], share={"./": "/src"}) as vm:\n'
        "    print(vm.guest.port(80))\n"
        'with launch("debian", ports="8080", share="./app:/src:ro"):\n'
        "    pass\n"
    )
    # A copy of the project's cache (./scripts/test runs mypy first; mypy checks each
    # cached module against its source): 1 s instead of 17 s re-reading the package.
    repo = Path(__file__).parents[3]
    cache = tmp_path / "mypy-cache"
    if (repo / ".mypy_cache").is_dir():
        shutil.copytree(repo / ".mypy_cache", cache)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), str(script)],
        capture_output=True, text=True, timeout=300, cwd=repo,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_launch_stays_callable_after_its_module_was_imported() -> None:
    # Importing the submodule makes it the package's attribute "launch"; before, the
    # package's launch was then a module: "'module' object is not callable".
    probe = (
        "import pytest_adare.launch\n"
        "from pytest_adare import launch\n"
        "try:\n"
        "    with launch('/no/such/image.qcow2'):\n"
        "        pass\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n"
    )
    command = [sys.executable, "-c", probe]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ImageError", done.stdout + done.stderr
