"""Clock tools: ``get_timestamp``, the guest's time (the facade's ``guest.now()``)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from adare_guest.tools.base import CallContext, ToolGroup, tool


class ClockTools(ToolGroup):
    """The guest's clock."""

    @tool(timeout=10)
    async def get_timestamp(self, ctx: CallContext, *, use_local: bool = False) -> dict[str, Any]:
        """The guest's clock: epoch seconds, ISO 8601 in UTC (and local time if asked)."""
        now = time.time()
        utc = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        result: dict[str, Any] = {
            "status": "success",
            "timestamp": now,
            "timezone": "UTC",
            "iso_format": utc.isoformat(),
        }
        if use_local:
            local = utc.astimezone()
            offset = local.utcoffset() or dt.timedelta()
            result["timezone"] = utc_offset_text(offset)
            result["timezone_name"] = local.tzname() or "local"
            result["local_time"] = local.isoformat()
            result["local_timezone"] = result["timezone_name"]
            result["utc_offset_seconds"] = int(offset.total_seconds())
        return result


def utc_offset_text(offset: dt.timedelta) -> str:
    """``+05:30``, ``-03:00``, ``+00:00`` (seconds, where a zone has them, are dropped).

    >>> utc_offset_text(dt.timedelta(hours=5, minutes=30))
    '+05:30'
    """
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"
