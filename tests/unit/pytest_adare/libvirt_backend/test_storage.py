"""``refresh_pool``: a pool busy making another runner's volume refuses a refresh; the
refresh is then left out, or tried again for ``wait`` seconds (a memory dump, a file the
daemon wrote behind the pool, needs it). The real daemon's refusal is exercised in
tests/e2e/test_libvirt_backend_e2e.py; here the retry rule, with libvirt's own error."""

from __future__ import annotations

import pytest

from pytest_adare.libvirt_backend.storage import refresh_pool

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is not installed (the dev extra)")
BUSY = "internal error: pool 'adare' has asynchronous jobs running."


class Pool:
    """Refuses ``busy`` refreshes with ``error``, then refreshes."""

    def __init__(self, busy: int, error: str = BUSY) -> None:
        self.busy, self.error, self.calls = busy, error, 0

    def refresh(self, flags: int) -> int:
        self.calls += 1
        if self.calls <= self.busy:
            raise libvirt.libvirtError(self.error)
        return 0


def test_a_busy_pool_is_not_refreshed_without_wait() -> None:
    pool = Pool(busy=5)
    refresh_pool(pool)
    assert pool.calls == 1


def test_with_wait_the_refresh_is_tried_until_the_pool_is_free() -> None:
    pool = Pool(busy=2)
    refresh_pool(pool, wait=30)
    assert pool.calls == 3


def test_a_pool_busy_past_wait_raises_libvirts_error() -> None:
    with pytest.raises(libvirt.libvirtError, match="asynchronous jobs running"):
        refresh_pool(Pool(busy=10**6), wait=0.5)


def test_any_other_failure_is_raised_at_once() -> None:
    pool = Pool(busy=1, error="internal error: pool 'adare' is not active")
    with pytest.raises(libvirt.libvirtError, match="not active"):
        refresh_pool(pool, wait=30)
    assert pool.calls == 1
