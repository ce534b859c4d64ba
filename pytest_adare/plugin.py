"""pytest plugin entry point (``pytest11: adare``).

Registers the options and the ``adare_vm`` marker, skips VM tests when no image is
given, and pulls in the fixtures (:mod:`pytest_adare.fixtures`) and the failure
reports (:mod:`pytest_adare.reports`).
"""

from __future__ import annotations

import pytest

from pytest_adare.options import MARKER_DOC, AdareOptions, read_options, register_options

pytest_plugins = ["pytest_adare.fixtures", "pytest_adare.reports"]

OPTIONS_KEY = pytest.StashKey[AdareOptions]()

VM_FIXTURES = frozenset({"adare_vm", "guest", "async_guest", "adare_vm_factory"})

NO_IMAGE_REASON = (
    "needs a VM image: pass --adare-vm=IMAGE (e.g. --adare-vm=debian) or set adare_vm "
    "in the ini file"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    config.stash[OPTIONS_KEY] = read_options(config)


def adare_options(config: pytest.Config) -> AdareOptions:
    """The session's merged, validated options."""
    return config.stash[OPTIONS_KEY]


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
        marker = item.get_closest_marker("adare_vm")
        if marker is not None and marker.kwargs.get("image"):
            continue
        if needs_vm(item):
            item.add_marker(skip)


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """Explain failed asserts on filesystem diffs by their unexpected entries."""
    from pytest_adare.forensics.assertrepr import assertrepr_compare

    return assertrepr_compare(op, left, right)
