"""Every async method of the facade and of the VM has a sync twin with exactly its
parameters; the machine's sync face is made the same way."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import AsyncIterator

import pytest

from pytest_adare.guest import AsyncGuest, AsyncKeyboard, Guest, Keyboard
from pytest_adare.libvirt_backend.machine import LibvirtMachine
from pytest_adare.loop_thread import SyncTwin, shared_loop, sync_context_twin, sync_twin
from pytest_adare.machine.core import MachineCore
from pytest_adare.qemu.machine import Machine
from pytest_adare.vm import VM, AsyncVM

MACHINE_SYNC_FACE = {
    "wait_for_console": "await_for_console", "screendump": "ascreendump",
    "type_text": "atype_text", "send_keys": "asend_keys", "mouse_move": "amouse_move",
    "mouse_click": "amouse_click", "savevm": "asavevm", "loadvm": "aloadvm",
    "reset": "areset",
}  # fmt: skip


def public_async_methods(cls: type) -> dict[str, inspect.Signature]:
    methods = {}
    for name, member in inspect.getmembers(cls):
        target = inspect.unwrap(member)
        if name.startswith("_") or not callable(member):
            continue
        if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
            methods[name] = inspect.signature(target)
    return methods


@pytest.mark.parametrize(
    ("async_cls", "sync_cls", "exempt"),
    [
        (AsyncGuest, Guest, {"on_home_loop"}),
        (AsyncKeyboard, Keyboard, set()),
        (AsyncVM, VM, {"start"}),  # returns the VM: see the test below
    ],
)
def test_each_public_async_method_has_a_sync_twin_with_the_same_parameters(
    async_cls: type, sync_cls: type, exempt: set[str]
) -> None:
    async_methods = public_async_methods(async_cls)
    assert {"shell", "type", "restore_ready"} & set(async_methods)  # the scan sees them
    for name, signature in async_methods.items():
        if name in exempt:
            continue
        twin = getattr(sync_cls, name, None)
        assert twin is not None, f"{sync_cls.__name__}.{name} is missing"
        assert not inspect.iscoroutinefunction(twin), f"{sync_cls.__name__}.{name} is async"
        assert inspect.signature(twin) == signature, name


def test_vm_start_takes_the_async_starts_parameters_and_returns_the_vm() -> None:
    twin = inspect.signature(VM.start)
    core = inspect.signature(AsyncVM.start)
    assert twin.parameters == core.parameters
    assert twin.return_annotation == "VM" and core.return_annotation == "None"


def test_the_vm_has_no_hand_written_wrapper_around_the_loop() -> None:
    """Each VM method that reaches the loop is a twin (``__wrapped__`` is the core's);
    ``console_tail`` reads the machine's console ring and never waits."""
    for name, member in vars(VM).items():
        if name.startswith("__") or not callable(member) or name in {"start", "console_tail"}:
            continue
        target = getattr(member, "__wrapped__", None)
        assert target is getattr(AsyncVM, name.lstrip("_")), f"VM.{name} is not a twin"


class Counter:
    def __init__(self) -> None:
        self.threads: list[str] = []

    async def add(self, a: int, *, b: int = 1) -> int:
        self.threads.append(threading.current_thread().name)
        return a + b

    @contextlib.asynccontextmanager
    async def span(self, label: str) -> AsyncIterator[list[str]]:
        events = [f"enter {label}"]
        try:
            yield events
        except ValueError:
            events.append("saw ValueError")
            raise
        events.append(f"exit {label}")


class SyncCounter(SyncTwin[Counter]):
    def __init__(self, aio: Counter) -> None:
        self.aio = aio

    add = sync_twin(Counter.add)
    span = sync_context_twin(Counter.span)


def test_a_sync_twin_runs_the_async_method_on_the_shared_loop() -> None:
    counter = SyncCounter(Counter())
    assert counter.add(2, b=3) == 5
    assert counter.aio.threads == [shared_loop()._thread.name]
    assert SyncCounter.add.__doc__ == Counter.add.__doc__


def test_a_sync_context_twin_enters_and_leaves_on_the_loop_and_sees_errors() -> None:
    counter = SyncCounter(Counter())
    with counter.span("a") as events:
        assert threading.current_thread() is threading.main_thread()
    assert events == ["enter a", "exit a"]
    with pytest.raises(ValueError, match="boom"), counter.span("b") as events:
        raise ValueError("boom")
    assert events == ["enter b", "saw ValueError"]


def test_a_sync_twin_called_from_the_loop_itself_refuses_instead_of_deadlocking() -> None:
    counter = SyncCounter(Counter())

    async def from_the_loop() -> None:
        counter.add(1)

    with pytest.raises(RuntimeError, match="await instead"):
        shared_loop().run(from_the_loop(), timeout=10)


def test_watch_fs_takes_exactly_the_options_of_fs_snapshot() -> None:
    snapshot = inspect.signature(AsyncGuest.fs_snapshot).parameters
    watch = inspect.signature(inspect.unwrap(AsyncGuest.watch_fs)).parameters
    assert list(watch) == list(snapshot)
    assert all(watch[name].default == snapshot[name].default for name in snapshot)


@pytest.mark.parametrize("machine_cls", [Machine, LibvirtMachine])
def test_every_backends_sync_face_is_the_cores_twins(machine_cls: type) -> None:
    for name, async_name in MACHINE_SYNC_FACE.items():
        twin = getattr(machine_cls, name)
        assert twin.__wrapped__ is getattr(MachineCore, async_name), name
        assert inspect.signature(twin) == inspect.signature(getattr(MachineCore, async_name))


def test_a_machines_sync_twin_runs_the_backends_own_async_method() -> None:
    class Recording(MachineCore):
        def __init__(self) -> None:
            self.sent: list[str] = []

        async def asavevm(self, tag: str, timeout: float = 120.0) -> None:
            self.sent.append(f"savevm {tag} {timeout}")

        async def asend_input(self, events: list[dict[str, object]]) -> None:
            self.sent.append(f"{len(events)} events")

    machine = Recording()
    machine.savevm("ready", timeout=5)
    machine.send_keys("ctrl", "c")
    assert machine.sent == ["savevm ready 5", "4 events"]
