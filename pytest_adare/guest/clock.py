"""The facade's clock: the guest's time ``now``, time let pass by it (``idle``), and
``set_time``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from adare_guest.tool_names import GET_TIMESTAMP, IDLE
from pytest_adare.errors import ToolError
from pytest_adare.guest.commands import GuestCommands

MAX_IDLE = 3600.0


class GuestClock(GuestCommands):
    """The guest's clock: read it, let time pass by it, set it."""

    async def now(self) -> datetime:
        """The guest's clock now, as an aware ``datetime`` in the guest's own time zone
        (adare's ``save_timestamp``).

        :raise ToolError: the agent's answer is not a time.
        """
        result = await self._checked(GET_TIMESTAMP, use_local=True)
        return guest_time(result)

    async def idle(self, seconds: float) -> None:
        """Let ``seconds`` (0..3600) pass in the guest, by its clock (adare's ``idle``)."""
        if not 0 <= seconds <= MAX_IDLE:
            raise ValueError(f"idle() takes 0..{MAX_IDLE:g} seconds, got {seconds!r}")
        await self._checked(IDLE, duration=float(seconds), timeout=seconds + 30)

    async def set_time(self, moment: datetime) -> None:
        """Set the guest's system clock (and its RTC where ``hwclock`` exists) to ``moment``.

        A naive ``moment`` is taken as UTC. Linux guests: ``date -u -s @EPOCH``;
        Windows guests: PowerShell ``Set-Date``.

        :raise GuestCommandFailed: the guest refused (e.g. not allowed to set the time).
        """
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
        epoch = aware.timestamp()
        if str(self.server_info.get("platform", "")).startswith("win"):
            utc = aware.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            command = f"powershell -NoProfile -Command \"Set-Date -Date '{utc}'\""
        else:
            command = (
                f"date -u -s @{epoch:.6f} >/dev/null && "
                "{ ! command -v hwclock >/dev/null || hwclock -w -u 2>/dev/null || true; }"
            )
        (await self.shell(command, timeout=30)).check()


def guest_time(result: Mapping[str, Any]) -> datetime:
    """The aware time in a ``get_timestamp(use_local=True)`` result (not trusted: checked).

    :raise ToolError: neither a parseable ``local_time`` nor a numeric ``timestamp``.
    """
    local = result.get("local_time")
    if isinstance(local, str) and len(local) <= 64:
        try:
            moment = datetime.fromisoformat(local)
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return moment
    stamp, offset = result.get("timestamp"), result.get("utc_offset_seconds", 0)
    if isinstance(stamp, (int, float)) and type(offset) is int and abs(offset) < 86400:
        try:
            zone = timezone(timedelta(seconds=offset))
            return datetime.fromtimestamp(stamp, zone)
        except (OverflowError, OSError, ValueError):
            pass
    raise ToolError(GET_TIMESTAMP, "the agent's answer holds no valid time", dict(result))
