"""``--adare-record``: a film of each test's screen, kept for the tests that fail.

While a test's call phase runs, every VM it uses is filmed by a
:class:`~pytest_adare.machine_tools.screen_recorder.ScreenRecorder` on the shared loop (QMP
screendumps, nothing in the guest; the last 20 s at 2 fps in bounded memory). The film
stops when the call phase ends, where the test failed: what comes after (a
``--adare-pause-on-fail`` pause, a handover, the teardown) is not in it. When the
call fails (``on-failure``, the default) or always (``always``), the film is written to
the test's artifacts as ``recording.webp`` (``recording-1.webp``, ... for further VMs),
named in the report (section ``adare recording``, property ``adare_recording``) and
embedded in the pytest-html report next to the final screenshot. A passing test under
``on-failure`` leaves no file. The VM layer is imported only once a test uses a VM.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_adare.plugin.fixtures import ITEM_VMS_KEY, artifacts_dir_for
from pytest_adare.plugin.options import adare_options
from pytest_adare.plugin.pool import PooledVM

if TYPE_CHECKING:  # the VM layer loads only when a test uses a VM
    from pytest_adare.machine_tools.screen_recorder import ScreenRecorder

RECORDERS_KEY = pytest.StashKey[list[tuple[PooledVM, "ScreenRecorder"]]]()
STOP_TIMEOUT = 30.0


def _run(coro: Any) -> Any:
    # Deferred: the shared loop thread belongs to the VM layer's runtime.
    from pytest_adare.loop_thread import shared_loop

    return shared_loop().run(coro, STOP_TIMEOUT)


def _machine_of(pooled: PooledVM) -> Callable[[], Any]:
    """The VM's current machine, looked up per frame (a reboot replaces it)."""
    return lambda: pooled.vm.machine


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Film each of the test's VMs while its call phase runs."""
    pooled_vms: list[PooledVM] = item.stash.get(ITEM_VMS_KEY, [])
    if adare_options(item.config).record != "off" and pooled_vms:
        # Deferred: the recorder (PIL, QMP) is part of the VM layer, loaded with the VMs.
        from pytest_adare.machine_tools.screen_recorder import ScreenRecorder

        started = item.stash.setdefault(RECORDERS_KEY, [])
        for pooled in pooled_vms:
            recorder = ScreenRecorder(_machine_of(pooled))
            _run(recorder.start())
            started.append((pooled, recorder))
    try:
        return (yield)
    finally:
        _stop_all(item.stash.get(RECORDERS_KEY, []))


def _stop_all(recorders: list[tuple[PooledVM, ScreenRecorder]]) -> None:
    for _, recorder in recorders:
        try:
            _run(recorder.stop())
        except Exception:  # a stuck loop must not hide the test's own outcome
            continue


def _take_all(item: pytest.Item) -> list[tuple[PooledVM, ScreenRecorder]]:
    recorders = item.stash.get(RECORDERS_KEY, [])
    item.stash[RECORDERS_KEY] = []
    _stop_all(recorders)  # already stopped, unless the call phase never ended
    return recorders


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Drop the films a passing test did not need."""
    _take_all(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    mode = adare_options(item.config).record
    if report.when != "call" or not item.stash.get(RECORDERS_KEY, []):
        return report
    recorders = _take_all(item)
    if not (mode == "always" or report.failed):
        return report
    folder = artifacts_dir_for(item)
    films: list[Path] = []
    for index, (_, recorder) in enumerate(recorders):
        target = folder / (f"recording-{index}.webp" if index else "recording.webp")
        try:
            film = recorder.save_film(target)
        except Exception as error:  # the test's own failure stands; say why there is no film
            report.sections.append(("adare recording", f"(no film: {error})"))
            continue
        if film is None:
            report.sections.append(("adare recording", f"(no film: {recorder.describe()})"))
            continue
        films.append(film)
        report.sections.append(("adare recording", f"{film}: {recorder.describe()}"))
        item.user_properties.append(("adare_recording", str(film)))
        report.user_properties.append(("adare_recording", str(film)))
    _html_extras(item.config, report, films)
    return report


def _html_extras(config: pytest.Config, report: pytest.TestReport, films: list[Path]) -> None:
    """Films as pytest-html image extras (animated WebP plays in an ``<img>``)."""
    if not films or not config.pluginmanager.hasplugin("html"):
        return
    # Optional plugin: imported only when pytest-html is active.
    import pytest_html  # type: ignore[import-not-found, import-untyped, unused-ignore]

    extras: list[Any] = list(getattr(report, "extras", []))
    for film in films:
        encoded = base64.b64encode(film.read_bytes()).decode("ascii")
        extras.append(
            pytest_html.extras.image(
                encoded, name=film.name, mime_type="image/webp", extension="webp"
            )
        )
    report.extras = extras  # type: ignore[attr-defined]
