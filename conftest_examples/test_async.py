"""The async guest, for pytest-asyncio tests: calls run concurrently."""

import asyncio

import pytest

from pytest_adare.guest import AsyncGuest


@pytest.mark.asyncio
async def test_concurrent_shell_calls(async_guest: AsyncGuest) -> None:
    results = await asyncio.gather(*(async_guest.shell(f"echo {n}") for n in range(4)))
    assert [r.stdout for r in results] == [f"{n}\n" for n in range(4)]
