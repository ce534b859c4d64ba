"""The sha256 of a host file: the one copy every layer uses (transfers, image builds,
evidence bundles)."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1024 * 1024
"""Read in 1 MiB blocks: large enough that hashing, not the calls, sets the pace."""


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of the file at ``path``.

    :raise OSError: it cannot be read.
    """
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()
