"""``tools/clock.py`` (``ClockTools``) over a real WebSocket: ``get_timestamp``."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from adare_guest.tools.clock import utc_offset_text

pytestmark = pytest.mark.asyncio


async def test_get_timestamp(client: Any) -> None:
    before = time.time()
    result = await client.ok("get_timestamp")
    after = time.time()
    assert before <= result["timestamp"] <= after
    assert result["timezone"] == "UTC"
    parsed = dt.datetime.fromisoformat(result["iso_format"])
    assert parsed.timestamp() == pytest.approx(result["timestamp"], abs=1e-3)
    local = await client.ok("get_timestamp", use_local=True)
    assert dt.datetime.fromisoformat(local["local_time"]).timestamp() == pytest.approx(
        local["timestamp"], abs=1e-3
    )


async def test_local_time_reports_the_utc_offset_and_the_zone_name(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        result = await client.ok("get_timestamp", use_local=True)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert result["timezone"] == "+05:30"
    assert result["timezone_name"] == result["local_timezone"] == "IST"
    assert result["utc_offset_seconds"] == 19800
    utc = await client.ok("get_timestamp")
    assert utc["timezone"] == "UTC"
    assert utc_offset_text(-dt.timedelta(hours=3, minutes=30)) == "-03:30"
    assert utc_offset_text(dt.timedelta(0)) == "+00:00"
