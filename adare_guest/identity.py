"""Who this agent is: version and a content hash of the code that runs in the guest.

The host computes :func:`bundle_hash` on its installed packages and the agent on its
own files (from a source tree or from inside a zip bundle); equal hashes mean the
guest runs exactly the host's agent, so the install step can be skipped.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable

from adare_guest import __version__

PROTOCOL_VERSION = 1
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


@lru_cache(maxsize=1)
def bundle_hash() -> str:
    """sha256 (hex) over the path and bytes of every ``.py`` file of the agent packages."""
    digest = hashlib.sha256()
    for package in _HASHED_PACKAGES:
        for name, node in sorted(_walk(resources.files(package), package), key=lambda t: t[0]):
            data = node.read_bytes()
            digest.update(f"{name}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()


def agent_identity() -> dict[str, object]:
    """The identity block the agent reports in ``connect`` answers and health reports."""
    return {
        "version": __version__,
        "bundle_hash": bundle_hash(),
        "protocol_version": PROTOCOL_VERSION,
        "platform": sys.platform,
        "python": platform.python_version(),
    }
