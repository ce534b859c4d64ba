"""The pool's per-test isolation, recovery and failure memory, with fake VMs (no QEMU).

A :class:`FakeVM` models the one thing isolation is about, the guest's state: a test
writes into ``state``; ``save_ready`` keeps a copy, ``restore_ready`` brings it back,
``reboot`` starts from a fresh disk (saved states are gone with the overlay). Every
call lands in one log shared by all fake VMs, so order across VMs is visible; a
call fails when the test queued an error for it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_adare.errors import AgentDisconnected, SnapshotError, VMTimeout
from pytest_adare.image.manifest import ImageManifest, write_manifest
from pytest_adare.machine_tools.run_dir import MARK
from pytest_adare.plugin.options import VMRequest
from pytest_adare.plugin.pool import VMBroken, VMPool
from pytest_adare.vm_options import READY_TAG, VMOptions
from tests.fakes.machine import FakeMachine


class FakeGuest:
    def __init__(self, vm: FakeVM) -> None:
        self._vm = vm

    def call(self, tool: str) -> dict[str, Any]:
        self._vm.record(f"call {tool}")
        return {"status": "success"}


@dataclass
class FakeVM:
    """The part of :class:`pytest_adare.vm.VM` the pool drives."""

    manifest: ImageManifest
    workdir: Path
    options: VMOptions
    name: str
    log: list[tuple[str, str]]
    fail: dict[str, list[BaseException]] = field(default_factory=dict)
    """Errors to raise, in order, from the next calls of each method."""
    died: str | None = None
    state: dict[str, str] = field(default_factory=dict)
    saved: dict[str, dict[str, str]] = field(default_factory=dict)

    def record(self, what: str) -> None:
        self.log.append((self.name, what))
        if self.fail.get(what):
            raise self.fail[what].pop(0)

    @property
    def guest(self) -> FakeGuest:
        return FakeGuest(self)

    @property
    def machine(self) -> FakeMachine:
        machine = FakeMachine(None, self.workdir).start()
        machine.died = self.died
        return machine

    def start(self, progress: Any = None) -> FakeVM:
        self.record("start")
        self.state = {"booted": "fresh"}
        return self

    def save_ready(self, tag: str = READY_TAG) -> None:
        self.record("save_ready")
        self.saved[tag] = dict(self.state)

    def restore_ready(self, tag: str = READY_TAG) -> None:
        self.record("restore_ready")
        self.state = dict(self.saved[tag])

    def reboot(self, progress: Any = None) -> None:
        self.record("reboot")
        self.saved.clear()
        self.died = None
        self.state = {"booted": "fresh"}

    def close(self) -> None:
        self.record("close")


class Factory:
    """``vm_factory`` for the pool: makes fake VMs, failing as told (by VM name)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.made: list[FakeVM] = []
        self.fail: dict[str, dict[str, list[BaseException]]] = {}

    def __call__(
        self, manifest: ImageManifest, workdir: Path, options: VMOptions, name: str
    ) -> FakeVM:
        vm = FakeVM(manifest, workdir, options, name, self.log, self.fail.get(name, {}))
        self.made.append(vm)
        return vm

    def calls(self, name: str) -> list[str]:
        return [what for who, what in self.log if who == name]


@pytest.fixture(autouse=True)
def _workdirs_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The pool makes its VM workdirs with mkdtemp; keep them (and any left) in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def image(tmp_path: Path) -> str:
    """A manifest file the pool resolves for real (the fake VMs never open the disk)."""
    path = tmp_path / "image" / "adare-image.json"
    path.parent.mkdir()
    (path.parent / "disk.qcow2").write_bytes(b"")
    write_manifest(ImageManifest(name="fake", disk=path.parent / "disk.qcow2"), path)
    return str(path)


@pytest.fixture
def factory() -> Factory:
    return Factory()


@pytest.fixture
def progress() -> list[str]:
    return []


@pytest.fixture
def pool(factory: Factory, progress: list[str]) -> VMPool:
    return VMPool(progress.append, vm_factory=factory)  # type: ignore[arg-type]


def _request(image: str, isolation: str, **options: Any) -> VMRequest:
    return VMRequest(image, VMOptions(**options), isolation)


def _run_test(pool: VMPool, request: VMRequest) -> dict[str, str]:
    """What the fixtures do for one test: get, prepare; the test then dirties the guest.

    Returns the guest state the test saw after ``prepare``.
    """
    pooled = pool.get(request)
    pool.prepare(pooled, request.isolation)
    seen = dict(pooled.vm.state)  # type: ignore[attr-defined]
    pooled.vm.state[f"written by test {len(seen)}"] = "x"  # type: ignore[attr-defined]
    return seen


# -- isolation ---------------------------------------------------------------------------


def test_snapshot_isolation_saves_once_then_restores_before_every_later_test(
    pool: VMPool, factory: Factory, image: str
) -> None:
    request = _request(image, "snapshot")
    seen = [_run_test(pool, request) for _ in range(3)]
    assert factory.calls("vm0") == ["start", "save_ready", "restore_ready", "restore_ready"]
    assert seen == [{"booted": "fresh"}] * 3
    assert len(factory.made) == 1
    assert pool.get(request).ready_saved


def test_a_snapshot_test_after_a_dirty_start_boots_fresh_before_saving(
    pool: VMPool, factory: Factory, image: str
) -> None:
    pooled = pool.get(_request(image, "snapshot"))
    pooled.dirty = True  # e.g. a test used adare_vm directly before any snapshot existed
    pool.prepare(pooled, "snapshot")
    assert factory.calls("vm0") == ["start", "reboot", "save_ready"]
    assert pooled.last_clean_state.startswith("fresh boot + save ready state ")


def test_reboot_isolation_reboots_the_same_vm_when_dirty_and_never_restores(
    pool: VMPool, factory: Factory, image: str
) -> None:
    request = _request(image, "reboot")
    first = pool.get(request).vm
    seen = [_run_test(pool, request) for _ in range(3)]
    assert factory.calls("vm0") == ["start", "reboot", "reboot"]
    assert seen == [{"booted": "fresh"}] * 3
    assert pool.get(request).vm is first
    assert len(factory.made) == 1


def test_a_reboot_drops_the_saved_ready_state(pool: VMPool, factory: Factory, image: str) -> None:
    _run_test(pool, _request(image, "snapshot"))
    _run_test(pool, _request(image, "reboot"))
    assert not pool.get(_request(image, "snapshot")).ready_saved
    # The next snapshot test saves a new ready state instead of loading a lost one.
    _run_test(pool, _request(image, "snapshot"))
    assert factory.calls("vm0") == ["start", "save_ready", "reboot", "reboot", "save_ready"]


def test_none_reuses_the_vm_as_the_last_test_left_it(
    pool: VMPool, factory: Factory, image: str
) -> None:
    request = _request(image, "none")
    seen = [_run_test(pool, request) for _ in range(3)]
    assert factory.calls("vm0") == ["start"]
    assert [len(state) for state in seen] == [1, 2, 3]


def test_none_checks_a_suspect_vm_still_answers(pool: VMPool, factory: Factory, image: str) -> None:
    pooled = pool.get(_request(image, "none"))
    pooled.suspect = True  # the last test ended with an infrastructure error
    pool.prepare(pooled, "none")
    pool.prepare(pooled, "none")
    assert factory.calls("vm0") == ["start", "call get_status"]


# -- recovery and failure memory ----------------------------------------------------------


def test_a_boot_failure_closes_the_vm_removes_its_workdir_and_breaks_the_configuration(
    pool: VMPool, factory: Factory, image: str
) -> None:
    cause = VMTimeout("console output matching 'adare-init: agent started'", 300.0, ["panic"])
    factory.fail["vm0"] = {"start": [cause]}
    request = _request(image, "snapshot")
    with pytest.raises(VMTimeout) as raised:
        pool.get(request)
    assert raised.value is cause
    vm = factory.made[0]
    assert factory.calls("vm0") == ["start", "close"]
    assert not vm.workdir.exists()
    for _ in range(2):
        with pytest.raises(VMBroken) as broken:
            pool.get(request)
        assert broken.value.first_cause == str(cause)
        assert "panic" in str(broken.value)
    assert len(factory.made) == 1  # no second boot of a broken configuration


def test_a_broken_configuration_leaves_other_configurations_alone(
    pool: VMPool, factory: Factory, image: str
) -> None:
    factory.fail["vm0"] = {"start": [RuntimeError("qemu-img: no space left")]}
    with pytest.raises(RuntimeError):
        pool.get(_request(image, "none", memory_mib=512))
    with pytest.raises(VMBroken, match="RuntimeError: qemu-img: no space left"):
        pool.get(_request(image, "none", memory_mib=512))
    other = pool.get(_request(image, "none", memory_mib=768))
    assert other.vm.options.memory_mib == 768


def test_a_vm_that_failed_to_clean_is_started_again_for_the_next_test(
    pool: VMPool, factory: Factory, image: str, progress: list[str]
) -> None:
    request = _request(image, "snapshot")
    _run_test(pool, request)
    factory.made[0].fail["restore_ready"] = [SnapshotError("'loadvm adare-ready' failed: boom")]
    assert _run_test(pool, request) == {"booted": "fresh"}
    assert factory.calls("vm0") == ["start", "save_ready", "restore_ready", "reboot", "save_ready"]
    assert "vm0 could not be cleaned ('loadvm adare-ready' failed: boom): starting it again" in (
        progress
    )
    assert pool.get(request).last_clean_state.startswith("fresh boot + save ready state ")


def test_a_dead_vm_is_started_again_before_the_next_test(
    pool: VMPool, factory: Factory, image: str, progress: list[str]
) -> None:
    request = _request(image, "none")
    _run_test(pool, request)
    factory.made[0].died = "guest panicked"
    assert _run_test(pool, request) == {"booted": "fresh"}
    assert factory.calls("vm0") == ["start", "reboot"]
    assert "vm0 died (guest panicked): starting it again" in progress


def test_a_failure_in_prepare_that_a_restart_cannot_fix_breaks_the_configuration(
    pool: VMPool, factory: Factory, image: str
) -> None:
    request = _request(image, "snapshot")
    _run_test(pool, request)
    vm = factory.made[0]
    vm.fail["restore_ready"] = [SnapshotError("'loadvm adare-ready' failed: boom")]
    reboot_failure = VMTimeout("qemu-ga to answer guest-sync", 65.0, ["no qga"])
    vm.fail["reboot"] = [reboot_failure]
    with pytest.raises(VMTimeout):
        _run_test(pool, request)
    with pytest.raises(VMBroken) as broken:
        pool.get(request)
    # The restart's failure is the cause: the clean step's was recovered from.
    assert broken.value.first_cause == str(reboot_failure)
    assert factory.calls("vm0")[-2:] == ["restore_ready", "reboot"]


def test_the_first_failure_stays_the_cause(pool: VMPool, factory: Factory, image: str) -> None:
    request = _request(image, "reboot")
    pooled = pool.get(request)
    pooled.dirty = True
    gone = AgentDisconnected("the agent went away")
    factory.made[0].fail["reboot"] = [gone, gone]
    with pytest.raises(AgentDisconnected):
        pool.prepare(pooled, "reboot")
    pool.mark_broken(pooled, "a later, lesser failure")
    with pytest.raises(VMBroken, match="the agent went away"):
        pool.get(request)


# -- which VM a test gets, and closing -------------------------------------------------------


def test_distinct_options_get_distinct_vms_and_equal_options_share_one(
    pool: VMPool, factory: Factory, image: str
) -> None:
    serial = pool.get(_request(image, "none", transport="serial"))
    again = pool.get(_request(image, "none", transport="serial"))
    small = pool.get(_request(image, "none", memory_mib=512))
    default = pool.get(_request(image, "none"))
    assert serial is again
    assert len({id(serial.vm), id(small.vm), id(default.vm)}) == 3
    assert [vm.options for vm in factory.made] == [
        VMOptions(transport="serial"),
        VMOptions(memory_mib=512),
        VMOptions(),
    ]
    # The isolation is per test, not part of the VM's configuration.
    assert pool.get(_request(image, "reboot", transport="serial")) is serial


def test_close_closes_every_vm_even_when_one_close_raises(
    pool: VMPool, factory: Factory, image: str
) -> None:
    pooled = [pool.get(_request(image, "none", cpus=n)) for n in (1, 2, 3)]
    extra = pool.start_extra(_request(image, "none"))
    first = RuntimeError("vm0 would not stop")
    factory.made[0].fail["close"] = [first]
    factory.made[1].fail["close"] = [RuntimeError("vm1 would not stop either")]
    with pytest.raises(RuntimeError) as raised:
        pool.close(keep=lambda p: False)
    assert raised.value is first
    closed = [who for who, what in factory.log if what == "close"]
    assert closed == ["vm0", "vm1", "vm2", "extra0"]
    assert not pooled[2].workdir.exists()
    assert not extra.workdir.exists()
    assert pool.all_vms() == []


def test_release_closes_one_vm_and_the_next_get_boots_another(
    pool: VMPool, factory: Factory, image: str
) -> None:
    request = _request(image, "none")
    pooled = pool.get(request)
    assert pool.release(pooled, keep=False) is None
    assert factory.calls("vm0") == ["start", "close"]
    assert not pooled.workdir.exists()
    assert pool.get(request) is not pooled
    assert len(factory.made) == 2


def test_a_workdir_is_a_run_folder_and_a_kept_one_is_the_users(
    pool: VMPool, image: str
) -> None:
    # Marked: a SIGKILLed run's workdir goes with the next run's first VM
    # (machine_tools/run_dir.py); kept for the user, it is never reaped.
    pooled = pool.get(_request(image, "none"))
    assert pooled.workdir.name.startswith("adare-vm0-")
    assert (pooled.workdir / MARK).is_file()
    pool.release(pooled, keep=True)
    assert pooled.workdir.is_dir() and not (pooled.workdir / MARK).exists()


def test_a_lan_member_runs_under_its_hostname_unique_among_the_running_vms(
    pool: VMPool, factory: Factory, progress: list[str], image: str
) -> None:
    request = _request(image, "snapshot")
    server = pool.start_extra(request, "server")
    client = pool.start_extra(request, "client")
    other_lan = pool.start_extra(request, "server")  # a second LAN's server, same test
    factory_vm = pool.start_extra(request)
    assert [p.vm.name for p in (server, client, other_lan, factory_vm)] == [
        "server", "client", "server-2", "extra0",
    ]  # fmt: skip
    assert progress[0].startswith("starting server: ") and "server ready in" in progress[1]
    pool.release(server, keep=False)
    assert pool.start_extra(request, "server").vm.name == "server"
    assert pool.start_extra(request).vm.name == "extra1"  # extra0 still runs
