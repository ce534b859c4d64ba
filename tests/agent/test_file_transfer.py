"""``adare_guest/file_transfer.py``: the running hash of a pull read out of order."""

from __future__ import annotations

import hashlib
import os

from adare_guest.file_transfer import PullHashes


def test_running_hash_takes_chunks_out_of_order_without_rereading() -> None:
    hashes = PullHashes()
    key = (1, 2, 3000, 4.0)
    blocks = [os.urandom(1000) for _ in range(3)]
    hashes.begin("/f")
    for offset in (2000, 0, 1000):
        hashes.feed("/f", key, offset, blocks[offset // 1000])
    assert hashes.finish("/f", key, 3000) == hashlib.sha256(b"".join(blocks)).hexdigest()


def test_running_hash_gives_up_on_a_gap_nobody_fills() -> None:
    hashes = PullHashes()
    key = (1, 2, 3000, 4.0)
    hashes.begin("/f")
    hashes.feed("/f", key, 2000, os.urandom(1000))
    assert hashes.finish("/f", key, 3000) is None  # the tool then hashes the file itself
