"""What the agent starts gets every signal at its default action, as init or a login
gives them, even when the agent itself inherited ignored ones (``nohup``, a script's
``&``) and although Python ignores SIGPIPE: exec keeps an ignored signal, and a program
ignoring SIGPIPE or SIGINT behaves differently (``yes | head -1`` says "Broken pipe",
^C stops nothing). The real agent process, through the guest facade."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.local_agent import local_agent_guest

TOKEN = "child-signals-token-0123456789abcdef"
STANDARD = (1 << 31) - 1
"""Signals 1..31 in ``/proc/PID/status``'s SigIgn mask (bit n-1 for signal n); glibc's
own real-time signals above them are not a program's to set."""


def ignored(status_line: str) -> list[str]:
    mask = int(status_line.split()[-1], 16) & STANDARD
    return [signal.Signals(n).name for n in range(1, 32) if mask & (1 << (n - 1))]


def test_commands_start_with_no_signal_ignored(tmp_path: Path) -> None:
    probe = "grep SigIgn /proc/self/status"
    with local_agent_guest(tmp_path, TOKEN, ignoring=(signal.SIGINT, signal.SIGQUIT)) as guest:
        assert ignored(guest.succeed(probe)) == []  # the fast start (posix_spawn)
        assert ignored(guest.succeed(probe, cwd="/")) == []  # through subprocess
        guest.shell(f"{probe} > {tmp_path}/bg.part && mv {tmp_path}/bg.part {tmp_path}/bg",
                    background=True).check()  # fmt: skip
        guest.wait_for_file(f"{tmp_path}/bg", timeout=30)
        assert ignored((tmp_path / "bg").read_text()) == []
        piped = guest.shell("yes | head -1")
        assert (piped.stdout, piped.stderr) == ("y\n", "")
        # ^C's signal reaches a shell's child and ends it.
        assert guest.shell("sh -c 'kill -INT $$; echo survived'").stdout == ""
