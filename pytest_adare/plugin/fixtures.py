"""The plugin's fixtures: ``adare_vm``, ``guest``, ``async_guest``, ``adare_vm_factory``,
``adare_artifacts``.

One :class:`~pytest_adare.plugin.pool.VMPool` per session (per xdist worker) owns the VMs.
``guest`` reads the test's ``adare_vm`` marker, skips on unmet needs, and hands out the
guest of a VM brought to a clean state per the isolation mode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_adare.plugin.matrix import MatrixImage, matrix_image
from pytest_adare.plugin.options import (
    VMRequest,
    adare_options,
    adare_vm_marker,
    apply_marker,
    session_request,
)
from pytest_adare.plugin.pool import PooledVM, VMPool, unmet_need

if TYPE_CHECKING:  # the VM layer loads only when a test needs a VM
    from pytest_adare.guest import AsyncGuest, Guest
    from pytest_adare.vm import VM

POOL_KEY = pytest.StashKey[VMPool]()
KEEP_HINTS_KEY = pytest.StashKey[list[str]]()
ITEM_VMS_KEY = pytest.StashKey[list[PooledVM]]()
"""The VMs a test used (its guest's VM, factory VMs): the reports read them."""
ARTIFACTS_KEY = pytest.StashKey[Path]()


def sanitise_nodeid(nodeid: str) -> str:
    """A directory name for a test id: ``a/test_x.py::test_y[1]`` → ``a_test_x.py__test_y_1``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("_.")
    return name[:200] or "test"


ARTIFACTS_ROOT_KEY = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def _adare_artifacts_root(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``--adare-artifacts`` or, by default, ``adare-artifacts`` under pytest's base temp."""
    root = adare_options(pytestconfig).artifacts or (
        tmp_path_factory.getbasetemp() / "adare-artifacts"
    )
    pytestconfig.stash[ARTIFACTS_ROOT_KEY] = root
    return root


def artifacts_dir_for(item: pytest.Item) -> Path:
    """The test's own evidence directory (created on first use)."""
    if ARTIFACTS_KEY not in item.stash:
        path = item.config.stash[ARTIFACTS_ROOT_KEY] / sanitise_nodeid(item.nodeid)
        path.mkdir(parents=True, exist_ok=True)
        item.stash[ARTIFACTS_KEY] = path
    return item.stash[ARTIFACTS_KEY]


class ProgressPrinter:
    """Writes one terminal line per VM phase (silent on xdist workers: no terminal)."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        worker = getattr(config, "workerinput", {}).get("workerid")
        self._prefix = f"adare[{worker}]" if worker else "adare"

    def __call__(self, message: str) -> None:
        reporter = self._config.pluginmanager.getplugin("terminalreporter")
        capture = self._config.pluginmanager.getplugin("capturemanager")
        if reporter is None or hasattr(self._config, "workerinput"):
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"{self._prefix}: {message}")
        else:
            reporter.write_line(f"{self._prefix}: {message}")


def _keep_decision(config: pytest.Config) -> Callable[[PooledVM], bool]:
    mode = adare_options(config).keep
    # A failing test handed to a keeper (plugin/keep_running.py) needs no kept disk.
    return lambda pooled: mode == "always" or (
        mode == "on-failure" and bool(set(pooled.failed_tests) - set(pooled.kept_running))
    )


@pytest.fixture(scope="session")
def _adare_pool(pytestconfig: pytest.Config, _adare_artifacts_root: Path) -> Iterator[VMPool]:
    pool = VMPool(ProgressPrinter(pytestconfig))
    pytestconfig.stash[POOL_KEY] = pool
    pytestconfig.stash[KEEP_HINTS_KEY] = []
    try:
        yield pool
    finally:
        pytestconfig.stash[KEEP_HINTS_KEY].extend(pool.close(_keep_decision(pytestconfig)))


def _record_vm(item: pytest.Item, pooled: PooledVM) -> None:
    used = item.stash.setdefault(ITEM_VMS_KEY, [])
    if pooled not in used:
        used.append(pooled)


def _image_spec(image: MatrixImage | None) -> str | None:
    return image.spec if image is not None else None


def marker_request(request: pytest.FixtureRequest) -> VMRequest:
    """The test's VM request from all its ``adare_vm`` markers (a bad one fails the test),
    on its image of the matrix."""
    marker = adare_vm_marker(request.node)
    image = _image_spec(matrix_image(request.node))
    try:
        return apply_marker(adare_options(request.config), marker, image)
    except ValueError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def adare_vm(
    _adare_pool: VMPool, pytestconfig: pytest.Config, _adare_image: MatrixImage | None
) -> VM:
    """The session's VM (one per xdist worker, and per image of a matrix), configured by
    the ``--adare-*`` options.

    Booted once; tests that use ``guest`` without a marker share it.
    """
    request = session_request(adare_options(pytestconfig), _image_spec(_adare_image))
    vm: VM = _adare_pool.get(request).vm
    return vm


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A test that uses ``adare_vm`` directly leaves it dirty, and its evidence counts."""
    yield
    pool = item.config.stash.get(POOL_KEY, None)
    if pool is None or "adare_vm" not in getattr(item, "fixturenames", ()):
        return
    pooled = pool.get(session_request(adare_options(item.config), _image_spec(matrix_image(item))))
    _record_vm(item, pooled)
    pooled.dirty = True


def acquire_vm(request: pytest.FixtureRequest, pool: VMPool) -> PooledVM:
    """The test's VM per its marker, needs checked, brought to a clean state."""
    vm_request = marker_request(request)
    reason = unmet_need(vm_request, pool.manifest(vm_request))
    if reason is not None:
        pytest.skip(reason)
    pooled = pool.get(vm_request)
    _record_vm(request.node, pooled)
    pool.prepare(pooled, vm_request.isolation)
    if pooled.last_clean_state:
        request.node.user_properties.append(("adare_clean_state", pooled.last_clean_state))
    return pooled


@pytest.fixture
def guest(
    request: pytest.FixtureRequest, _adare_pool: VMPool, _adare_image: MatrixImage | None
) -> Guest:
    """The agent of a clean VM for this test (``--adare-isolation`` decides how clean).

    ``snapshot``: the VM is restored to the ready state saved after boot; ``reboot``: it
    restarts; ``none``: it is reused as the previous test left it.
    """
    guest: Guest = acquire_vm(request, _adare_pool).vm.guest
    return guest


@pytest.fixture
def async_guest(
    request: pytest.FixtureRequest, _adare_pool: VMPool, _adare_image: MatrixImage | None
) -> AsyncGuest:
    """``guest``'s async twin for pytest-asyncio tests: ``await async_guest.shell(...)``.

    It is ``guest.aio``: awaitable from the test's own event loop (calls are carried
    over to the loop the agent connection lives on).
    """
    aio: AsyncGuest = acquire_vm(request, _adare_pool).vm.guest.aio
    return aio


class VMFactory:
    """Starts extra VMs for one test; every one is closed when the test ends.

    ``adare_vm_factory(**arguments)`` takes the ``adare_vm`` marker's arguments
    (``MARKER_KEYS``) and returns a started :class:`~pytest_adare.vm.VM` (its agent at
    ``vm.guest``); without ``image=`` it runs the test's image (of the matrix).
    """

    def __init__(self, request: pytest.FixtureRequest, pool: VMPool) -> None:
        self._request = request
        self._pool = pool
        self._started: list[PooledVM] = []

    def __call__(self, **options: Any) -> VM:
        mark = pytest.mark.adare_vm(**options).mark
        try:
            vm_request = apply_marker(
                adare_options(self._request.config), mark,
                _image_spec(matrix_image(self._request.node)),
            )  # fmt: skip
        except ValueError as error:
            raise pytest.UsageError(f"adare_vm_factory: {error}") from None
        reason = unmet_need(vm_request, self._pool.manifest(vm_request))
        if reason is not None:
            pytest.skip(reason)
        pooled = self._pool.start_extra(vm_request)
        self._started.append(pooled)
        _record_vm(self._request.node, pooled)
        return pooled.vm

    def close_all(self, keep: Callable[[PooledVM], bool]) -> list[str]:
        """Close every VM this factory started; returns the keep hints."""
        return self._pool.release_all(self._started, keep)


@pytest.fixture
def adare_vm_factory(
    request: pytest.FixtureRequest, _adare_pool: VMPool, _adare_image: MatrixImage | None
) -> Iterator[VMFactory]:
    """Start more VMs in one test (e.g. two guests); all are closed after the test."""
    factory = VMFactory(request, _adare_pool)
    try:
        yield factory
    finally:
        request.config.stash[KEEP_HINTS_KEY].extend(
            factory.close_all(_keep_decision(request.config))
        )


@pytest.fixture
def adare_artifacts(request: pytest.FixtureRequest, _adare_artifacts_root: Path) -> Path:
    """This test's evidence directory, ``<--adare-artifacts>/<sanitised test id>/``.

    Files a test writes here (e.g. ``diff.export(adare_artifacts / "diff.json", "json")``)
    are listed in the failure report.
    """
    return artifacts_dir_for(request.node)
