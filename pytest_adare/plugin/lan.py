"""The ``adare_lan`` fixture: private LAN segments between the test's VMs (docs/networks.md).

``adare_lan(subnet="10.77.0.0/24", internet=False)`` makes a
:class:`~pytest_adare.lan.segment.Lan` (call it again for more LANs); its members are
VMs of the session's pool, started as ``adare_vm_factory`` starts them, so the reports,
``--adare-evidence`` and ``--adare-keep`` cover them. When the test ends every member
is closed, then every segment. With ``--adare-pcap`` each segment's traffic goes to
``lan-<name>.pcap`` in the test's artifacts. On ``--adare-hypervisor`` each LAN is an
isolated libvirt network on the VMs' hypervisor, made here and removed with the LAN.
The VM layer is imported on first use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_adare.plugin.fixtures import (
    KEEP_HINTS_KEY,
    _image_spec,
    _keep_decision,
    _record_vm,
    artifacts_dir_for,
)
from pytest_adare.plugin.matrix import matrix_image
from pytest_adare.plugin.options import adare_options, apply_marker
from pytest_adare.plugin.pool import PooledVM, VMPool, unmet_need

if TYPE_CHECKING:
    from pytest_adare.lan.pcap import PcapWriter
    from pytest_adare.lan.port import LanPort
    from pytest_adare.lan.segment import Lan
    from pytest_adare.vm import VM

DEFAULT_SUBNET = "10.77.0.0/24"


class LanFactory:
    """``adare_lan(subnet=..., internet=False)``: a new LAN for this test; see the module."""

    def __init__(self, request: pytest.FixtureRequest, pool: VMPool) -> None:
        self._request = request
        self._pool = pool
        self.lans: list[Lan] = []
        self._pooled: dict[int, PooledVM] = {}
        self._captures: list[tuple[Lan, PcapWriter]] = []

    def __call__(self, subnet: str = DEFAULT_SUBNET, *, internet: bool = False) -> Lan:
        # Deferred: the LAN (VMs, QEMU) loads when a test first asks for one.
        from pytest_adare.lan.addressing import private_subnet
        from pytest_adare.lan.segment import Lan
        from pytest_adare.machine.registry import backend_for
        from pytest_adare.machine_tools.run_dir import make_run_dir

        options = adare_options(self._request.config)
        index = len(self.lans)
        backend = backend_for(options.session_vm)
        private_subnet(subnet)  # bad input fails before a network is made
        network = None
        directory = make_run_dir(f"adare-lan{index}-")  # 0700
        try:
            # A backend with networks of its own makes the segment (libvirt); else the host
            # forwards it between the members' sockets (QEMU).
            network = backend.lan_network(options.session_vm, index)
            lan = Lan(
                f"lan{index}", subnet, internet=internet, directory=directory, index=index,
                starter=self._start, closer=self._close, backend=backend.name,
                siblings=self.lans, network=network,
            )  # fmt: skip
        except BaseException:
            if network is not None:
                network.close()
            directory.rmdir()
            raise
        if options.pcap:
            target = artifacts_dir_for(self._request.node) / f"lan-{lan.name}.pcap"
            target.unlink(missing_ok=True)  # a rerun of the same test id
            try:
                self._captures.append((lan, lan.start_capture(target)))
            except BaseException:
                lan.close()  # libvirt: the segment has no capture point
                raise
        return lan

    def _start(self, name: str, ports: tuple[LanPort, ...], given: dict[str, Any]) -> VM:
        mark = pytest.mark.adare_vm(**given).mark
        image = _image_spec(matrix_image(self._request.node))
        try:
            vm_request = apply_marker(adare_options(self._request.config), mark, image)
        except ValueError as error:
            raise pytest.UsageError(f"adare_lan: {name}: {error}") from None
        reason = unmet_need(vm_request, self._pool.manifest(vm_request))
        if reason is not None:
            pytest.skip(f"LAN member {name}: {reason}")
        options = dataclasses.replace(vm_request.options, lan_ports=ports)
        pooled = self._pool.start_extra(dataclasses.replace(vm_request, options=options), name)
        self._pooled[id(pooled.vm)] = pooled
        _record_vm(self._request.node, pooled)
        return pooled.vm

    def _close(self, vms: Sequence[VM]) -> None:
        pooled = [self._pooled.pop(id(vm)) for vm in vms if id(vm) in self._pooled]
        hints = self._pool.release_all(pooled, _keep_decision(self._request.config))
        self._request.config.stash[KEEP_HINTS_KEY].extend(hints)

    def close_all(self) -> None:
        """Stop the ``--adare-pcap`` captures, then close every LAN (and its members)."""
        for lan, writer in self._captures:
            lan.stop_capture(writer)
        for lan in self.lans:
            lan.stop_member_captures()
        first_error: BaseException | None = None
        for lan in self.lans:
            try:
                lan.close()
            except BaseException as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error


@pytest.fixture
def adare_lan(request: pytest.FixtureRequest, _adare_pool: VMPool) -> Iterator[LanFactory]:
    """Private layer-2 segments for this test: ``lan = adare_lan(subnet="10.77.0.0/24")``,
    then ``lan.start("server")``; see docs/networks.md."""
    factory = LanFactory(request, _adare_pool)
    try:
        yield factory
    finally:
        factory.close_all()
