"""Ready means ready: a systemd guest has finished starting (``is-system-running``)."""

from __future__ import annotations

from pytest_adare.vm_phases.readiness.base import ReadyTarget

SETTLE_TIMEOUT = 180.0
"""Bound on ``systemctl is-system-running --wait`` before a systemd guest counts as ready."""
NO_SYSTEMD = 3
"""The script's exit code when the guest does not run systemd."""


def settle_script(timeout: float) -> str:
    """The guest shell script: systemd's verdict within ``timeout`` s, then failed units."""
    return (
        f"command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] || exit {NO_SYSTEMD}; "
        f"timeout {timeout:.0f} systemctl is-system-running --wait; "
        "systemctl list-units --state=failed --no-legend --plain | cut -d' ' -f1 | head -5"
    )



def settle_timeout(boot_timeout: float, default_boot_timeout: float) -> float:
    """:data:`SETTLE_TIMEOUT`, scaled up with a boot timeout raised above its default: an
    image given twice the boot time (a cloud-init first boot under TCG, whose agent starts
    before cloud-init's last stages) gets twice the time to settle.

    >>> settle_timeout(300, 300), settle_timeout(600, 300), settle_timeout(60, 300)
    (180.0, 360.0, 180.0)
    """
    return SETTLE_TIMEOUT * max(1.0, boot_timeout / default_boot_timeout)


class SystemRunning:
    """Wait (bounded) until systemd is done starting; ``degraded`` is ready with a warning
    naming the failed units, and a state still starting after the bound is ready anyway
    (the tests say more than a timeout would). Guests without systemd are ready at once."""

    def __init__(self, timeout: float = SETTLE_TIMEOUT) -> None:
        self.timeout = timeout

    async def wait(self, target: ReadyTarget) -> str | None:
        script = settle_script(self.timeout)
        result = await target.guest.aio.shell(script, timeout=self.timeout + 15)
        if result.returncode == NO_SYSTEMD and not result.stdout.strip():
            return None
        state, *failed = result.stdout.split() or ["unknown"]
        if state == "running":
            return "systemd: running"
        if state == "degraded":
            return f"systemd: degraded, ready anyway (failed: {', '.join(failed) or '?'})"
        return f"systemd still {state!r} after {self.timeout:.0f} s; ready anyway"
