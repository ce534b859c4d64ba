"""Who this agent is: version and a content hash of the code that runs in the guest.

Run from a zip bundle, the agent reports the bundle's ``BUNDLE_ID`` member: a hash
the host's bundle builder computed over every other member (our packages and the
third-party ones alike). Run from a source tree (no bundle), it reports a hash over
the ``.py`` files of ``adare_guest`` and ``frame_codec``. Equal hashes mean the guest
runs exactly the host's agent, so the install step can be skipped.

Imports here are kept light: the agent calls :func:`bundle_hash` at start-up.
"""

from __future__ import annotations

import sys
import zipimport
from functools import lru_cache
from typing import TYPE_CHECKING

from adare_guest import __version__

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # novermin (type checking only)

PROTOCOL_VERSION = 1
BUNDLE_ID_MEMBER = "BUNDLE_ID"
_HASHED_PACKAGES = ("adare_guest", "frame_codec")


def _walk(node: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for child in node.iterdir():
        name = f"{prefix}/{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                found.extend(_walk(child, name))
        elif child.name.endswith(".py"):
            found.append((name, child))
    return found


def source_hash() -> str:
    """sha256 (hex) over the path and bytes of every ``.py`` file of the agent packages."""
    # Deferred: only a source-tree agent hashes itself; start-up stays light (module docstring).
    import hashlib

    # Deferred with hashlib: importlib.resources is only needed to walk a source tree.
    from importlib import resources

    digest = hashlib.sha256()
    for package in _HASHED_PACKAGES:
        for name, node in sorted(_walk(resources.files(package), package), key=lambda t: t[0]):
            data = node.read_bytes()
            digest.update(f"{name}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()


def running_bundle_id() -> str | None:
    """The ``BUNDLE_ID`` of the zip bundle this agent was imported from, else None."""
    spec = getattr(sys.modules.get("adare_guest"), "__spec__", None)
    loader = getattr(spec, "loader", None)
    if not isinstance(loader, zipimport.zipimporter):
        return None
    try:
        data = loader.get_data(f"{loader.archive}/{BUNDLE_ID_MEMBER}")
    except OSError:  # a bundle from before BUNDLE_ID existed
        return None
    return data.decode("ascii").strip() or None


@lru_cache(maxsize=1)
def bundle_hash() -> str:
    """This agent's identity hash: the bundle's ``BUNDLE_ID``, else :func:`source_hash`."""
    return running_bundle_id() or source_hash()


def agent_identity() -> dict[str, object]:
    """The identity block the agent reports in ``connect`` answers and health reports."""
    # Deferred: platform is only needed once a client connects, not at start-up.
    import platform

    return {
        "version": __version__,
        "bundle_hash": bundle_hash(),
        "protocol_version": PROTOCOL_VERSION,
        "platform": sys.platform,
        "python": platform.python_version(),
    }
