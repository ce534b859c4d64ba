"""Ready means ready: a systemd guest has finished starting (``is-system-running``)."""

from __future__ import annotations

from pytest_adare.vm_phases.readiness.base import ReadyTarget

SETTLE_TIMEOUT = 180.0
"""Bound on ``systemctl is-system-running --wait`` before a systemd guest counts as ready."""
NO_SYSTEMD = 3
"""The script's exit code when the guest does not run systemd."""
SCRIPT = (
    f"command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] || exit {NO_SYSTEMD}; "
    f"timeout {SETTLE_TIMEOUT:.0f} systemctl is-system-running --wait; "
    "systemctl list-units --state=failed --no-legend --plain | cut -d' ' -f1 | head -5"
)


class SystemRunning:
    """Wait (bounded) until systemd is done starting; ``degraded`` is ready with a warning
    naming the failed units, and a state still starting after the bound is ready anyway
    (the tests say more than a timeout would). Guests without systemd are ready at once."""

    async def wait(self, target: ReadyTarget) -> str | None:
        result = await target.guest.aio.shell(SCRIPT, timeout=SETTLE_TIMEOUT + 15)
        if result.returncode == NO_SYSTEMD and not result.stdout.strip():
            return None
        state, *failed = result.stdout.split() or ["unknown"]
        if state == "running":
            return "systemd: running"
        if state == "degraded":
            return f"systemd: degraded, ready anyway (failed: {', '.join(failed) or '?'})"
        return f"systemd still {state!r} after {SETTLE_TIMEOUT:.0f} s; ready anyway"
