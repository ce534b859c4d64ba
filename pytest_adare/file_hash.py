"""The sha256 of a host file: the one copy every layer uses (transfers, image builds,
evidence bundles)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

BLOCK = 1024 * 1024
"""Read in 1 MiB blocks: large enough that hashing, not the calls, sets the pace."""


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of the file at ``path``.

    :raise OSError: it cannot be read.
    """
    with path.open("rb") as stream:
        return stream_sha256(stream)


def stream_sha256(stream: BinaryIO, copy_to: BinaryIO | None = None) -> str:
    """The sha256 hex digest of what is left to read in ``stream``, a block at a time
    (never the whole in memory), each block also written to ``copy_to`` when given.

    :raise OSError: a read or write failed.
    """
    digest = hashlib.sha256()
    while block := stream.read(BLOCK):
        digest.update(block)
        if copy_to is not None:
            copy_to.write(block)
    return digest.hexdigest()
