"""pytest plugin entry point (``pytest11: adare``).

Registers the options and the ``adare_vm`` marker, skips VM tests when no image is
given, and pulls in the fixtures (:mod:`pytest_adare.plugin.fixtures`) and the failure
reports (:mod:`pytest_adare.plugin.reports`). Loading it imports pytest and the
option parser only: the VM layer (QEMU, websockets, PIL, numpy) is imported when a
test first needs a VM.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_adare.cache_dir import IMAGE_CACHE_ENV
from pytest_adare.plugin.options import (
    MARKER_DOC,
    OPTIONS_KEY,
    adare_options,
    adare_vm_marker,
    read_options,
    register_options,
)

pytest_plugins = [
    "pytest_adare.plugin.matrix",
    "pytest_adare.plugin.fixtures",
    "pytest_adare.plugin.lan",
    "pytest_adare.plugin.reports",
    "pytest_adare.plugin.hypervisor_evidence",
    "pytest_adare.plugin.recording",
    "pytest_adare.plugin.checks",
    "pytest_adare.plugin.records",
    "pytest_adare.plugin.image_facts",
    "pytest_adare.plugin.matrix_summary",
    "pytest_adare.plugin.pause",
    "pytest_adare.plugin.keep_running",
    "pytest_adare.plugin.tool_validation",
]

__all__ = ["adare_options"]

VM_FIXTURES = frozenset(
    {"adare_vm", "guest", "async_guest", "adare_vm_factory", "adare_image", "adare_lan"}
)

NO_IMAGE_REASON = (
    "needs a VM image: pass --adare-vm=IMAGE (e.g. --adare-vm=debian) or set adare_vm "
    "in the ini file"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    config.stash[OPTIONS_KEY] = options = read_options(config)
    if options.image_cache is not None:  # images resolved later (and adare-image) read it
        os.environ[IMAGE_CACHE_ENV] = str(options.image_cache)
    default_asyncio_loop_scope(config)


ASYNCIO_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


def default_asyncio_loop_scope(config: pytest.Config) -> None:
    """Give pytest-asyncio's fixture loop scope the value ``function`` when nobody set it.

    pytest-asyncio (our dependency, for ``async_guest``) warns on every run of a project
    that leaves ``asyncio_default_fixture_loop_scope`` unset; installing this plugin must
    not add that warning to unrelated projects. ``function`` is the value pytest-asyncio
    announces as its future default. A value from the ini file or ``-o`` always wins.
    Runs before pytest-asyncio's own ``pytest_configure`` reads it (``tryfirst``).
    """
    if not config.pluginmanager.hasplugin("asyncio"):
        return
    try:
        if config.getini(ASYNCIO_LOOP_SCOPE):
            return
    except ValueError:  # a pytest-asyncio without that setting: nothing to warn about
        return
    # pytest has no public setter for an ini value; getini answers from this cache.
    inicache = getattr(config, "_inicache", None)
    if isinstance(inicache, dict):
        inicache[ASYNCIO_LOOP_SCOPE] = "function"


def needs_vm(item: pytest.Item) -> bool:
    """Whether ``item`` uses a VM fixture or carries the ``adare_vm`` marker."""
    fixturenames = getattr(item, "fixturenames", ())
    return bool(VM_FIXTURES.intersection(fixturenames)) or (
        item.get_closest_marker("adare_vm") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if adare_options(config).vm:
        return
    skip = pytest.mark.skip(reason=NO_IMAGE_REASON)
    for item in items:
        marker = adare_vm_marker(item)
        if marker is not None and (marker.kwargs.get("image") or marker.kwargs.get("images")):
            continue
        if needs_vm(item):
            item.add_marker(skip)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """An adare experiment folder's ``playbook.yml`` is collected as its experiment."""
    if file_path.name != "playbook.yml":
        return None
    # Deferred: YAML, Jinja2 and the runner only for a project with playbooks.
    from pytest_adare.playbook.collect import ExperimentFile

    options = adare_options(parent.config)
    return ExperimentFile.from_parent(
        parent, path=file_path, environments=dict(options.environments), images=options.images
    )


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """Explain failed asserts on filesystem diffs by their unexpected entries."""
    # Deferred: most sessions never fail an assert on a diff.
    from pytest_adare.forensics.assertrepr import assertrepr_compare

    return assertrepr_compare(op, left, right)
