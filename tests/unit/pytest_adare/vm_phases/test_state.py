"""A VM's state holds its parts (machine, QGA client, guest facade, GUI choice, progress)
and changes them only through its own methods: the phases make the parts and hand them
over, none writes or reads another object's private attribute."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_adare.errors import AdareError
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.vm_phases.state import GuiChoice, VMState

REPO = Path(__file__).resolve().parents[4]
STATE = REPO / "pytest_adare" / "vm_phases" / "state.py"


def private_fields() -> set[str]:
    """The ``self._name`` attributes ``VMState.__init__`` sets."""
    tree = ast.parse(STATE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VMState")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id == "self" and node.attr.startswith("_")
    }  # fmt: skip


def test_no_module_outside_the_state_touches_its_private_parts() -> None:
    fields = private_fields()
    assert {"_machine", "_qga", "_guest", "_gui_choice", "_progress"} <= fields
    found = []
    for path in sorted((REPO / "pytest_adare").rglob("*.py")):
        if path == STATE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # ``self._machine`` of another class is its own; ``vm._machine`` is not.
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                node.value.id == "self"
            )
            if isinstance(node, ast.Attribute) and node.attr in fields and not own:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} .{node.attr}")
    assert found == [], "use VMState's methods (adopt_machine, current_guest, ...):\n" + "\n".join(
        found
    )


class Machine:
    qga_path = Path("/nonexistent/qga.sock")


def state(tmp_path: Path) -> VMState:
    manifest = ImageManifest(name="plain", disk=tmp_path / "disk.qcow2", format="qcow2")
    qgas: list[Path] = []

    def new_qga(path: Path) -> Any:
        qgas.append(path)
        return object()

    return VMState(
        manifest, tmp_path, name="vm0", machine_factory=cast(Any, None),
        qga_factory=cast(Any, new_qga), connector=cast(Any, None),
    )  # fmt: skip


def test_the_parts_are_absent_until_adopted_and_gone_once_dropped(tmp_path: Path) -> None:
    vm = state(tmp_path)
    assert vm.current_machine is None and vm.current_guest is None and vm.current_qga is None
    with pytest.raises(AdareError, match="has no machine yet"):
        vm.machine  # noqa: B018 (the property raises)
    with pytest.raises(AdareError, match="has no agent connection"):
        vm.guest  # noqa: B018
    machine = cast(Any, Machine())
    assert vm.adopt_machine(machine) is machine and vm.machine is machine
    qga = vm.qga  # made on first use, for the held machine's socket
    assert vm.current_qga is qga and vm.qga is qga
    vm.drop_machine()
    assert vm.current_machine is None and vm.current_qga is None


def test_the_gui_choice_and_progress_are_what_was_handed_over(tmp_path: Path) -> None:
    vm = state(tmp_path)
    assert vm.gui == vm.options.gui and vm.gui_choice is None and vm.progress is None
    choice = GuiChoice("host", "asked for")
    assert vm.choose_gui(choice) is choice and vm.gui == "host" and vm.gui_choice is choice
    lines: list[str] = []
    vm.report_to(lines.append)
    vm.say("ready")
    assert vm.progress is not None and lines == ["vm0 ready"]
    vm.report_to(None)
    vm.say("quiet")
    assert lines == ["vm0 ready"]
