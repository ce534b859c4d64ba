"""The facade's waits on the guest: a command until it succeeds or fails, a file, a TCP
port, a systemd unit; and the journal those services write (the polling and parsing
are :mod:`pytest_adare.guest_waits` and :mod:`pytest_adare.guest_journal`)."""

from __future__ import annotations

import shlex
import time
from datetime import datetime
from typing import Any

from pytest_adare.errors import AdareError
from pytest_adare.guest.commands import GuestCommands
from pytest_adare.guest.results import ShellResult
from pytest_adare.guest_journal import (
    DEFAULT_LIMIT as JOURNAL_LIMIT,
)
from pytest_adare.guest_journal import (
    NO_SYSTEMD,
    JournalEntry,
    journal_command,
    output_budget,
    parse_journal,
)
from pytest_adare.guest_waits import (
    DEFAULT_WAIT,
    LISTENING_TCP_COMMAND,
    MIN_CHECK_BUDGET,
    check_port,
    host_tcp_answer,
    listening_tcp_ports,
    output_tail,
    poll_until,
)


class GuestWaits(GuestCommands):
    """Waits until something holds in the guest, polled every 100 ms; the journal."""

    async def wait_until_succeeds(
        self, command: str, /, timeout: float = DEFAULT_WAIT, **shell_options: Any
    ) -> ShellResult:
        """Run ``command`` every 100 ms until it exits 0; that run's result.

        :raise GuestWaitTimeout: after ``timeout`` s, with the last exit code and output.
        """
        return await self._wait_for_exit(command, True, timeout, shell_options)

    async def wait_until_fails(
        self, command: str, /, timeout: float = DEFAULT_WAIT, **shell_options: Any
    ) -> ShellResult:
        """Run ``command`` every 100 ms until it exits non-zero; that run's result.

        :raise GuestWaitTimeout: after ``timeout`` s, with the last output.
        """
        return await self._wait_for_exit(command, False, timeout, shell_options)

    async def _wait_for_exit(
        self, command: str, ok: bool, timeout: float, options: dict[str, Any]
    ) -> ShellResult:
        what = f"{command!r} to {'succeed' if ok else 'fail'}"

        async def run(budget: float) -> ShellResult:
            return await self.shell(command, **{"timeout": budget, **options})

        return await poll_until(
            run, lambda r: r.ok == ok, timeout, what, describe_run
        )  # fmt: skip

    async def wait_for_file(self, path: str, timeout: float = DEFAULT_WAIT) -> str:
        """Wait until ``path`` exists in the guest (any kind of file); returns it.

        :raise GuestWaitTimeout: after ``timeout`` s.
        """
        await poll_until(
            lambda budget: self.shell(f"test -e {shlex.quote(path)}", timeout=budget),
            lambda r: r.ok, timeout, f"the file {path}", lambda r: "it does not exist",
        )  # fmt: skip
        return path

    async def wait_for_port(
        self, port: int, timeout: float = DEFAULT_WAIT, *, closed: bool = False,
        from_host: bool = False,
    ) -> None:  # fmt: skip
        """Wait until a TCP socket in the guest listens on ``port`` (on any address), or
        with ``closed=True`` until none does. Reads the kernel's socket table
        (``/proc/net/tcp``), so the guest needs no ``ss`` or ``nc``. ``from_host=True``:
        then also until the port's forward (:meth:`port`) answers on this host.

        :raise GuestWaitTimeout: after ``timeout`` s, listing the ports that listened.
        :raise PortForwardError: ``from_host`` for a port that is not forwarded.
        """
        check_port(port)
        if from_host:
            address = self.port(port)
            if closed:
                raise ValueError("wait_for_port: from_host waits for an answer, not closed=True")

        async def listening(budget: float) -> set[int]:
            result = await self.shell(LISTENING_TCP_COMMAND, timeout=budget)
            return listening_tcp_ports(result.stdout)

        deadline = time.monotonic() + timeout
        await poll_until(
            listening, lambda ports: (port in ports) != closed, timeout,
            f"TCP port {port} to {'close' if closed else 'listen'}",
            lambda ports: "listening TCP ports " + (", ".join(map(str, sorted(ports))) or "none"),
        )  # fmt: skip
        if from_host:
            await poll_until(
                lambda budget: host_tcp_answer(address, budget), lambda why: not why,
                max(deadline - time.monotonic(), MIN_CHECK_BUDGET),
                f"guest TCP port {port} to answer on {address[0]}:{address[1]}", str,
            )  # fmt: skip

    async def wait_for_unit(self, unit: str, timeout: float = DEFAULT_WAIT) -> None:
        """Wait until the systemd unit ``unit`` is active.

        :raise AdareError: the guest does not run systemd, or the unit failed (with
            ``systemctl status``).
        :raise GuestWaitTimeout: after ``timeout`` s, with the unit's last state.
        """
        command = (
            f"[ -d /run/systemd/system ] || exit {NO_SYSTEMD}; "
            f"systemctl is-active -- {shlex.quote(unit)}"
        )

        def settled(result: ShellResult) -> bool:
            # Active, or a state no wait will change: no systemd, or the unit failed.
            return result.ok or result.returncode == NO_SYSTEMD or result.stdout.strip() == "failed"

        last = await poll_until(
            lambda budget: self.shell(command, timeout=budget), settled, timeout,
            f"the unit {unit} to be active",
            lambda r: f"state {r.stdout.strip() or 'unknown'!r} (exit code {r.returncode})",
        )  # fmt: skip
        if last.returncode == NO_SYSTEMD:
            raise AdareError(
                f"wait_for_unit({unit!r}): the guest does not run systemd "
                "(/run/systemd/system is missing); wait for the service another way, "
                "e.g. wait_for_port() or wait_until_succeeds()"
            )
        if not last.ok:
            status = await self.shell(f"systemctl status --no-pager -- {shlex.quote(unit)}")
            raise AdareError(f"the unit {unit} failed:\n{status.stdout[-3000:]}")

    async def journal(
        self,
        unit: str | None = None,
        since: datetime | str | None = None,
        *,
        identifier: str | None = None,
        limit: int = JOURNAL_LIMIT,
    ) -> list[JournalEntry]:
        """The systemd journal's newest ``limit`` entries (oldest first), parsed from
        ``journalctl -o json``: of one ``unit``, one syslog ``identifier``, since a time
        (a ``datetime``, naive is UTC, or journalctl's ``"-5min"``, ``"today"``).

        :raise AdareError: the guest does not run systemd, journalctl failed, or its
            output is not a journal's (or above the bound for ``limit`` entries).
        """
        command = journal_command(unit, since, identifier, limit)
        budget = output_budget(limit)
        result = await self.shell(command, timeout=120, max_output_bytes=budget)
        if result.returncode == NO_SYSTEMD:
            raise AdareError(
                "journal(): the guest does not run systemd (/run/systemd/system is "
                "missing); its logs are files (/var/log, the agent's run dir)"
            )
        if not result.ok:
            raise AdareError(
                f"journalctl failed with exit code {result.returncode}: {result.stderr[-500:]}"
            )
        if result.truncated:
            raise AdareError(
                f"the journal's output is above {budget} bytes for {limit} entries: "
                "ask for fewer (unit=, since=, identifier=, limit=)"
            )
        return parse_journal(result.stdout, limit)


def describe_run(result: ShellResult) -> str:
    """A shell run for a timeout's message: exit code and the end of its output."""
    return (
        f"exit code {result.returncode}, stdout {output_tail(result.stdout)}, "
        f"stderr {output_tail(result.stderr)}"
    )
