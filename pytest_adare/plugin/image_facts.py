"""The ``adare_image`` fixture: which image this run of a test is on.

``adare_image.name`` is the image's short name (the matrix's test id), ``.spec`` what
``--adare-vm`` (or the marker) said, ``.manifest`` the resolved manifest; the OS facts
``.distribution``, ``.version``, ``.pretty_name`` and ``.kernel`` are read from the guest
(``/etc/os-release`` and ``uname -r`` through the agent) on first use, once per image
per session::

    def test_trash(guest, adare_image, adare_record):
        if adare_image.version == "12":
            ...
        adare_record("kernel", adare_image.kernel)

Facts that were read travel with the test's reports (the ``adare_image_facts``
property), so the matrix report shows each image's distribution and kernel.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import pytest

from pytest_adare.plugin.fixtures import marker_request
from pytest_adare.plugin.matrix import MatrixImage, short_name
from pytest_adare.plugin.options import VMRequest
from pytest_adare.plugin.pool import VMPool

if TYPE_CHECKING:  # the image layer loads only when a test needs a VM
    from pytest_adare.image.manifest import ImageManifest

FACTS_PROPERTY = "adare_image_facts"
FACTS_COMMAND = "cat /etc/os-release; echo; echo '@@uname'; uname -r"
FACTS_KEY = pytest.StashKey[dict[str, "OSFacts"]]()


@dataclass(frozen=True)
class OSFacts:
    """What the guest says it is: ``/etc/os-release``'s ``ID``, ``VERSION_ID`` and
    ``PRETTY_NAME``, and ``uname -r``."""

    distribution: str
    version: str
    pretty_name: str
    kernel: str


def parse_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` as a dict (shell-quoted values unquoted; bad lines ignored).

    >>> parse_os_release('ID=debian\\nVERSION_ID="12"\\n# c\\nPRETTY_NAME="Debian 12"')
    {'ID': 'debian', 'VERSION_ID': '12', 'PRETTY_NAME': 'Debian 12'}
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, equals, raw = line.strip().partition("=")
        if not equals or not key.isidentifier():
            continue
        try:
            words = shlex.split(raw)
        except ValueError:
            continue
        values[key] = " ".join(words)
    return values


def facts_from_output(output: str) -> OSFacts:
    """The facts from :data:`FACTS_COMMAND`'s output."""
    release, _, uname = output.partition("@@uname")
    values = parse_os_release(release)
    return OSFacts(
        distribution=values.get("ID", "unknown"),
        version=values.get("VERSION_ID", ""),
        pretty_name=values.get("PRETTY_NAME", ""),
        kernel=uname.strip(),
    )


class ImageInfo:
    """This test's image: ``name``, ``spec``, ``manifest`` and the guest's OS facts."""

    def __init__(self, item: pytest.Item, pool: VMPool, request: VMRequest, name: str) -> None:
        self.name = name
        self.spec = request.image
        self._item = item
        self._pool = pool
        self._request = request

    def __repr__(self) -> str:
        return f"ImageInfo(name={self.name!r}, spec={self.spec!r})"

    @property
    def manifest(self) -> ImageManifest:
        """The image's manifest (a built-in is built on first use)."""
        return self._pool.manifest(self._request)

    @property
    def os(self) -> OSFacts:
        """The guest's OS facts (read once per image per session; boots its VM if needed)."""
        known = self._item.config.stash.setdefault(FACTS_KEY, {})
        if self.spec not in known:
            guest = self._pool.get(self._request).vm.guest
            known[self.spec] = facts_from_output(guest.shell(FACTS_COMMAND).check().stdout)
        facts = known[self.spec]
        property_ = (FACTS_PROPERTY, json.dumps({self.name: asdict(facts)}))
        if property_ not in self._item.user_properties:
            self._item.user_properties.append(property_)
        return facts

    @property
    def distribution(self) -> str:
        """``/etc/os-release`` ``ID`` (``debian``)."""
        return self.os.distribution

    @property
    def version(self) -> str:
        """``/etc/os-release`` ``VERSION_ID`` (``12``; empty on a rolling release)."""
        return self.os.version

    @property
    def pretty_name(self) -> str:
        """``/etc/os-release`` ``PRETTY_NAME`` (``Debian GNU/Linux 12 (bookworm)``)."""
        return self.os.pretty_name

    @property
    def kernel(self) -> str:
        """``uname -r`` in the guest."""
        return self.os.kernel


@pytest.fixture
def adare_image(
    request: pytest.FixtureRequest, _adare_pool: VMPool, _adare_image: MatrixImage | None
) -> ImageInfo:
    """Which image this test runs on (see :mod:`pytest_adare.plugin.image_facts`)."""
    vm_request = marker_request(request)
    name = _adare_image.name if _adare_image is not None else short_name(vm_request.image)
    return ImageInfo(request.node, _adare_pool, vm_request, name)
