"""The facade's waits as pure parts: the poll loop, the socket table, windows, the clock."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest

from pytest_adare.errors import GuestWaitTimeout, ToolError
from pytest_adare.guest import guest_time
from pytest_adare.guest_waits import (
    check_port,
    listening_tcp_ports,
    poll_until,
    windows_from_result,
)

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4A5D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0F02000A:4A5D 0202000A:C350 01 00000000:00000000 02:000A1234 00000000     0        0 3
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 0 0
   1: garbage
   2: 00000000000000000000000000000000:ZZZZ 00000000000000000000000000000000:0000 0A 0 0
"""


def test_listening_ports_come_from_tcp_and_tcp6_and_ignore_other_states() -> None:
    # 0x4A5D = 19037 listens; the connected socket on the same port (state 01) does not
    # count twice; 0x0CEA = 3306; tcp6 0x0050 = 80; malformed lines are left out.
    assert listening_tcp_ports(PROC_NET_TCP) == {19037, 3306, 80}


@pytest.mark.parametrize("port", [0, 65536, -1, "80", True, 8.0])
def test_a_port_out_of_range_or_of_the_wrong_type_is_refused(port: object) -> None:
    with pytest.raises(ValueError, match=r"port must be an int in 1\.\.65535"):
        check_port(port)  # type: ignore[arg-type]


def test_poll_until_returns_the_first_result_that_is_done() -> None:
    seen: list[float] = []

    async def check(budget: float) -> int:
        seen.append(budget)
        return len(seen)

    assert asyncio.run(poll_until(check, lambda n: n == 3, 10.0, "three", str)) == 3
    assert all(9.0 < budget <= 10.0 for budget in seen)  # each check gets the time left


def test_poll_until_times_out_with_what_it_waited_for_and_the_last_result() -> None:
    async def check(budget: float) -> str:
        return "still booting"

    started = time.monotonic()
    with pytest.raises(GuestWaitTimeout) as raised:
        asyncio.run(poll_until(check, lambda r: False, 0.5, "the service", lambda r: r))
    elapsed = time.monotonic() - started
    assert 0.4 < elapsed < 5.0
    assert raised.value.what == "the service" and raised.value.last == "still booting"
    assert 3 <= raised.value.attempts <= 6  # polled every 100 ms, not once a second
    assert "timed out after 0.5 s waiting for the service" in str(raised.value)
    assert isinstance(raised.value, TimeoutError)


def test_poll_until_refuses_a_timeout_that_is_not_positive() -> None:
    async def check(budget: float) -> int:
        return 1

    with pytest.raises(ValueError, match="timeout must be a positive"):
        asyncio.run(poll_until(check, bool, 0, "x", str))


def test_windows_of_the_wrong_shape_are_left_out() -> None:
    result = {
        "windows": [
            {"id": 7, "title": "Files", "x": 1, "y": 2, "width": 300, "height": 200},
            {"id": 8, "title": None, "x": 1, "y": 2, "width": 3, "height": 4},
            {"id": 9, "title": "x", "x": "1", "y": 2, "width": 3, "height": 4},
            "not a window",
        ]
    }
    [window] = windows_from_result(result)
    assert (window.title, window.center) == ("Files", (151, 102))
    assert windows_from_result({"windows": "nope"}) == []


def test_guest_time_reads_the_local_time_with_its_offset() -> None:
    moment = guest_time({"local_time": "2026-12-01T10:20:30.5+05:30", "timestamp": 0})
    assert moment.utcoffset() == timedelta(hours=5, minutes=30)
    assert moment == datetime(2026, 12, 1, 4, 50, 30, 500000, tzinfo=timezone.utc)


def test_guest_time_falls_back_to_the_timestamp_and_refuses_garbage() -> None:
    moment = guest_time({"timestamp": 86400.0, "utc_offset_seconds": 3600})
    assert moment == datetime(1970, 1, 2, tzinfo=timezone.utc)
    assert moment.utcoffset() == timedelta(hours=1)
    for bad in ({"local_time": "yesterday"}, {"timestamp": 1e300}, {"timestamp": "1"}, {}):
        with pytest.raises(ToolError, match="no valid time"):
            guest_time(bad)
