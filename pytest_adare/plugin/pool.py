"""The plugin's VMs: booted on first need, shared by tests asking for the same configuration.

A :class:`VMPool` lives for the pytest session (one per xdist worker). It resolves
images, boots a VM per distinct :class:`~pytest_adare.plugin.options.VMRequest` key, brings
it to a clean state before each test (:meth:`VMPool.prepare`) and remembers the first
infrastructure failure of each configuration, so later tests error at once with that
cause instead of timing out one by one.

A VM that died (guest panic or poweroff, QEMU crashed or killed, QMP gone), or whose
clean step failed, is started again for the next test (:meth:`VM.reboot`, one
progress line saying why); only when that fresh start fails too is the configuration
broken (:class:`VMBroken`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adare_guest.tool_names import GET_STATUS
from pytest_adare.errors import AdareError, ImageError, InfrastructureError
from pytest_adare.interactive.registry import SOCKET_PATH_MAX
from pytest_adare.machine_tools.run_dir import disown_run_dir, make_run_dir
from pytest_adare.plugin.options import VMRequest
from pytest_adare.vm_options import READY_TAG, VMOptions

if TYPE_CHECKING:  # the VM layer (QEMU, PIL, websockets) loads only when a test needs it
    from pytest_adare.image.manifest import ImageManifest
    from pytest_adare.vm import VM

Progress = Callable[[str], None]
VMFactoryFunc = Callable[["ImageManifest", Path, "VMOptions", str], "VM"]
"""Makes the (not yet started) VM for a manifest, workdir, options and name."""


def _new_vm(manifest: ImageManifest, workdir: Path, options: VMOptions, name: str) -> VM:
    # Deferred: the VM layer (qemu.qmp, websockets, PIL) loads with the first VM.
    from pytest_adare.vm import VM

    return VM(manifest, workdir, options, name=name)


class VMBroken(InfrastructureError):
    """A VM configuration failed before; carries the first cause."""

    def __init__(self, description: str, first_cause: str):
        self.first_cause = first_cause
        super().__init__(
            f"the VM ({description}) is broken since an earlier failure; "
            f"first cause:\n{first_cause}"
        )


def describe_error(error: BaseException) -> str:
    """An error as a first cause: our errors speak for themselves, others get their type."""
    return str(error) if isinstance(error, AdareError) else f"{type(error).__name__}: {error}"


def first_line(text: str) -> str:
    """The first line of ``text`` (an error's message can carry a console tail)."""
    return text.strip().splitlines()[0] if text.strip() else text


def is_infrastructure_error(error: BaseException) -> bool:
    """Whether ``error`` means the VM or the agent broke (an ERROR, not a FAILURE)."""
    return isinstance(error, InfrastructureError)


@dataclass(eq=False)  # identity: two VMs are never "equal"
class PooledVM:
    """One VM of the pool and what the pool knows about its state."""

    vm: VM
    request: VMRequest
    manifest: ImageManifest
    workdir: Path
    ready_saved: bool = False
    """A ``snapshot`` ready state exists in this machine's overlay (a reboot loses it)."""
    dirty: bool = False
    """A test has run on it since it was last cleaned."""
    suspect: bool = False
    """The last test ended with an infrastructure error: the agent or the connection may
    be broken even though the machine still runs, so it is never trusted as is."""
    failed_tests: list[str] = field(default_factory=list)
    kept_running: list[str] = field(default_factory=list)
    """The failing tests whose state a keeper runs on (``--adare-keep``): their VM needs
    no disk kept for them."""
    last_clean_state: str = ""


def unmet_need(request: VMRequest, manifest: ImageManifest) -> str | None:
    """Why ``manifest`` cannot serve ``request``'s declared needs, or None."""
    if request.needs_desktop and not manifest.desktop:
        return (
            f"needs a desktop (adare_vm gui=...) but image {request.image!r} has none; "
            "use a desktop image such as debian-desktop"
        )
    if request.needs_os and request.needs_os != manifest.os:
        return f"needs a {request.needs_os} guest but image {request.image!r} is {manifest.os}"
    return None


class VMPool:
    """Session-wide VMs keyed by configuration; everything is closed by :meth:`close`."""

    def __init__(
        self,
        progress: Progress,
        *,
        workdir_root: Path | None = None,
        vm_factory: VMFactoryFunc | None = None,
    ) -> None:
        self._progress = progress
        self._vm_factory = vm_factory or _new_vm
        self._workdir_root = workdir_root
        self._manifests: dict[str, ImageManifest] = {}
        self._vms: dict[tuple[Any, ...], PooledVM] = {}
        self._broken: dict[tuple[Any, ...], str] = {}
        self._extra: list[PooledVM] = []

    def manifest(self, request: VMRequest) -> ImageManifest:
        """The request's image, resolved (and built when a built-in) once per session."""
        key = ("image", request.image)
        if key in self._broken:
            raise VMBroken(f"image {request.image}", self._broken[key])
        if request.image not in self._manifests:
            # Deferred: resolving may build an image; plugin load stays light.
            from pytest_adare.image.resolve import resolve_image
            from pytest_adare.image_provision import build_on_disk

            try:
                self._manifests[request.image] = resolve_image(
                    request.image, progress=self._progress, booted=build_on_disk
                )
            except ImageError as error:
                self._broken[key] = str(error)
                raise
        return self._manifests[request.image]

    def get(self, request: VMRequest) -> PooledVM:
        """The shared VM for ``request``'s configuration, booted on first use.

        :raise VMBroken: when this configuration failed before (with the first cause).
        """
        key = request.vm_key
        if key in self._broken:
            raise VMBroken(request.describe(), self._broken[key])
        if key not in self._vms:
            try:
                self._vms[key] = self._boot(request, f"vm{len(self._vms)}")
            except Exception as error:  # whatever broke the boot breaks it for every test
                self._broken[key] = describe_error(error)
                raise
        return self._vms[key]

    def start_extra(self, request: VMRequest, name: str | None = None) -> PooledVM:
        """A VM of its own (``adare_vm_factory``; a LAN member, ``name`` its hostname);
        closed with the pool or by :meth:`release`.

        Its name (progress lines, reports) is ``name``, or ``extraN``, made unique among
        the pool's running VMs (``server-2`` beside a running ``server``).
        """
        taken = {pooled.vm.name for pooled in self.all_vms()}
        names = (
            (name if n == 1 else f"{name}-{n}" for n in itertools.count(1))
            if name
            else (f"extra{n}" for n in itertools.count())
        )
        unique = next(candidate for candidate in names if candidate not in taken)
        pooled = self._boot(request, unique)
        self._extra.append(pooled)
        return pooled

    def _boot(self, request: VMRequest, name: str) -> PooledVM:
        manifest = self.manifest(request)
        # A run folder: what a SIGKILLed pytest leaves goes with the next run's first VM.
        workdir = make_run_dir(f"adare-{name}-", self._workdir_root)
        vm = self._vm_factory(manifest, workdir, request.options, name)
        started = time.monotonic()
        try:
            self._progress(f"starting {name}: {request.describe()}")
            vm.start(progress=self._progress)
            self._progress(f"{name} ready in {time.monotonic() - started:.1f} s")
        except BaseException:
            vm.close()
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return PooledVM(vm, request, manifest, workdir)

    def prepare(self, pooled: PooledVM, isolation: str) -> None:
        """Bring ``pooled`` to the clean state ``isolation`` promises, before a test.

        A dead VM, or one whose clean step fails, is started again first; when that
        fails too, the VM's configuration is marked broken.
        """
        started = time.monotonic()
        try:
            # A dead VM is not worth cleaning: restoring a snapshot needs a live QEMU.
            why = self._death(pooled)
            if why is None:
                try:
                    done = self._clean(pooled, isolation)
                except Exception as error:  # any failure: the VM's state is unknown
                    why = f"could not be cleaned ({first_line(describe_error(error))})"
            if why is not None:
                # A VM is cheap to start again: replace it once rather than fail the test.
                done = self._replace(pooled, isolation, why)
        except Exception as error:
            # A fresh boot failed too, so the next test would fail the same way: every
            # later test of this configuration fails fast with this first cause.
            self.mark_broken(pooled, describe_error(error))
            raise
        # Dirty from now on: the test about to run may change anything in the guest.
        pooled.dirty = True
        pooled.suspect = False
        took = time.monotonic() - started
        pooled.last_clean_state = f"{done} {took:.2f} s" if done else ""

    def _clean(self, pooled: PooledVM, isolation: str) -> str:
        vm = pooled.vm
        if isolation == "none":
            # Nothing to restore, but after an infrastructure error prove the agent
            # answers: a failing call makes prepare() replace the VM.
            if pooled.suspect:
                vm.guest.call(GET_STATUS)
            return ""
        # "snapshot" without a saved ready state is first a "reboot": a state saved from
        # a used guest would hand every later test what this one left behind.
        if isolation == "reboot" or (isolation == "snapshot" and not pooled.ready_saved):
            done = ""
            if pooled.dirty or pooled.suspect:
                self._restart(pooled)
                done = "fresh boot"
            if isolation == "snapshot":
                started = time.monotonic()
                pooled.vm.save_ready()
                pooled.ready_saved = True
                took = time.monotonic() - started
                self._progress(f"{pooled.vm.name} snapshot: ready state saved ({took:.2f} s)")
                done = (done + " + " if done else "") + "save ready state"
            return done
        # A suspect VM is restored even if unused: loadvm also resets the agent's state,
        # and the reconnect after it proves the agent answers.
        if pooled.dirty or pooled.suspect:
            vm.restore_ready()
            return "restore ready state"
        return ""

    @staticmethod
    def _death(pooled: PooledVM) -> str | None:
        """``died (why)`` when ``pooled``'s machine is gone (QEMU exited, guest panicked,
        shut down or stopped), else None."""
        try:
            pooled.vm.machine.check_alive()
        except AdareError as died:
            return f"died ({first_line(str(getattr(died, 'reason', died)))})"
        return None

    def _replace(self, pooled: PooledVM, isolation: str, why: str) -> str:
        """Start ``pooled`` again from scratch, then clean it as ``isolation`` says."""
        self._progress(f"{pooled.vm.name} {why}: starting it again")
        self._restart(pooled)
        pooled.dirty = pooled.suspect = False
        done = self._clean(pooled, isolation)
        return "fresh boot" + (f" + {done}" if done else "")

    def _restart(self, pooled: PooledVM) -> None:
        """Start the VM again from a fresh overlay on the base image (:meth:`VM.reboot`)."""
        pooled.ready_saved = False
        started = time.monotonic()
        pooled.vm.reboot(progress=self._progress)
        self._progress(f"{pooled.vm.name} ready again in {time.monotonic() - started:.1f} s")

    def mark_broken(self, pooled: PooledVM, cause: str) -> None:
        """Remember ``cause`` as the first failure of ``pooled``'s configuration."""
        self._broken.setdefault(pooled.request.vm_key, cause)

    def all_vms(self) -> list[PooledVM]:
        return [*self._vms.values(), *self._extra]

    def release(self, pooled: PooledVM, keep: bool) -> str | None:
        """Close one VM; with ``keep`` its workdir stays and a boot hint is returned."""
        if pooled in self._extra:
            self._extra.remove(pooled)
        self._vms = {k: v for k, v in self._vms.items() if v is not pooled}
        hint = keep_hint(pooled) if keep else None
        pooled.vm.close()
        if keep:
            disown_run_dir(pooled.workdir)  # the user's now: never reaped
        else:
            shutil.rmtree(pooled.workdir, ignore_errors=True)
        return hint

    def close(self, keep: Callable[[PooledVM], bool]) -> list[str]:
        """Close every VM (errors in one do not stop the others); returns keep hints."""
        return self.release_all(self.all_vms(), keep)

    def release_all(self, vms: list[PooledVM], keep: Callable[[PooledVM], bool]) -> list[str]:
        """Close ``vms``, keeping those ``keep`` says; one failing does not stop the rest."""
        hints: list[str] = []
        first_error: BaseException | None = None
        for pooled in list(vms):
            try:
                hint = self.release(pooled, keep(pooled))
            except BaseException as error:
                first_error = first_error or error
                continue
            if hint:
                hints.append(hint)
        if first_error is not None:
            raise first_error
        return hints


KEPT_SOCKET_NAME = "agent-serial.sock"
"""The longest name among a kept machine's sockets (``qmp.sock``, ``qga.sock``, this)."""


def kept_sockets_dir(workdir: Path) -> Path:
    """Where a kept machine's sockets go when it boots again: ``workdir/sockets``, or, when
    a socket's path there would pass the kernel's limit (a deep workdir: QEMU refuses to
    start), a new private directory under the temporary directory, kept for the hint."""
    sockets = workdir / "sockets"
    if len(os.fsencode(sockets / KEPT_SOCKET_NAME)) <= SOCKET_PATH_MAX:
        sockets.mkdir(exist_ok=True)
        return sockets
    return Path(tempfile.mkdtemp(prefix="adare-kept-"))


def keep_hint(pooled: PooledVM) -> str:
    """How to boot a kept VM's disk again, for the terminal summary: the machine's own
    command (:meth:`~pytest_adare.machine.base.MachineBackend.keep_hint`) with its sockets
    in the kept workdir and, when a ready state was saved, loading it; a backend that
    cannot keep a disk says so in the same line."""
    # Deferred: only --adare-keep needs the machine contract; plugin load stays light.
    from pytest_adare.machine.base import Capability, unsupported

    machine = pooled.vm.machine
    if Capability.KEEP not in machine.capabilities:
        where = pooled.vm.options.hypervisor or f"the {machine.backend} backend"
        why = unsupported(machine.backend, Capability.KEEP)
        return f"not kept: {pooled.request.describe()} ran on {where}; {why}"
    sockets = kept_sockets_dir(pooled.workdir)
    command = machine.keep_hint(sockets, READY_TAG if pooled.ready_saved else None)
    return (
        f"kept the disk of {pooled.request.describe()}: {machine.overlay_path}\n"
        f"  boot it again: {command}"
    )
