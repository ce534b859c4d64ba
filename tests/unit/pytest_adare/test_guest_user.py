"""``guest.user.session()``'s reader of logind's sessions (``loginctl show-session``)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_adare.guest_user import MAX_SESSIONS, LoginSession, parse_login_sessions

# SESSIONS_SCRIPT's output on debian-xfce after LightDM's autologin (captured from a VM).
XFCE = (Path(__file__).resolve().parents[1] / "data/logind/debian-xfce.txt").read_text()


def test_the_autologin_session_of_a_real_guest_reads() -> None:
    assert parse_login_sessions(XFCE) == [
        LoginSession(
            id="1", user="user", uid=1000, type="x11", session_class="user", seat="seat0",
            state="active", remote=False, service="lightdm-autologin", display=":0",
            leader=229, started=datetime(2026, 12, 2, 19, 22, 14, tzinfo=timezone.utc),
        )
    ]  # fmt: skip


def test_sessions_without_a_seat_or_a_readable_time_read_too() -> None:
    ssh = (
        "Id=c3\nUser=0\nName=root\nTimestamp=\nSeat=\nDisplay=\nRemote=yes\nService=sshd\n"
        "Leader=900\nType=tty\nClass=user\nState=online\nEpoch=\n"
    )
    (session,) = parse_login_sessions(f"\n{ssh}\n\n")
    assert (session.id, session.seat, session.remote, session.started) == ("c3", "", True, None)
    both = parse_login_sessions(f"{XFCE}\n{ssh}\n")
    assert [s.id for s in both] == ["1", "c3"]
    assert parse_login_sessions("") == []


@pytest.mark.parametrize(
    "text",
    [
        "Id=1\nName=user\n",  # no uid, type, class, state
        XFCE.replace("User=1000", "User=root"),
        XFCE.replace("Leader=229", "Leader=x"),
    ],
)
def test_what_logind_would_not_print_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a logind session"):
        parse_login_sessions(text)


def test_a_flood_of_sessions_is_bounded() -> None:
    with pytest.raises(ValueError, match=f"more than {MAX_SESSIONS} logind sessions"):
        parse_login_sessions("\n".join([XFCE] * (MAX_SESSIONS + 1)))
    huge_epoch = XFCE.replace("Epoch=1796239334", "Epoch=" + "9" * 40)
    assert parse_login_sessions(huge_epoch)[0].started is None
