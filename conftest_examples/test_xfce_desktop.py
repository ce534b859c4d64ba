"""The adare paper's Linux experiments on a real desktop: XFCE on systemd (``debian-xfce``).

LightDM logged the desktop user in at boot, as an installed Debian with "log in
automatically" does; the session is XFCE's own (xfwm4, the panel, Thunar, Mousepad).
Each test starts from the same ready state: the session up, a terminal focused. The
user deletes a document in Thunar, or opens it in Mousepad from Thunar, and the test
checks what that left in the user's home; the login itself left a logind session, a
``wtmp`` record and journal lines.
"""

import re
from datetime import datetime, timedelta

import pytest

from pytest_adare.guest import Guest
from pytest_adare.plugin.checks import SoftChecks

XFCE = pytest.mark.adare_vm(image="debian-xfce", gui=True)
REPORT = "Quarterly report\nnumbers: 1 2 3\n"


def a_document(guest: Guest) -> str:
    """The user's ~/Documents/report.txt, written as the user."""
    path = f"{guest.user.documents}/report.txt"
    guest.user.run(f"printf %s '{REPORT}' > {path}").check()
    return path


@XFCE
def test_a_file_deleted_in_thunar_lands_in_the_trash(
    guest: Guest, adare_checks: SoftChecks
) -> None:
    user = guest.user
    document = a_document(guest)
    trash = f"{user.home}/.local/share/Trash"
    before = guest.fs_snapshot(user.home)

    thunar = user.start(f"thunar {user.documents}")
    guest.wait_for_window("Documents", timeout=120)
    guest.click_text("report.txt", timeout=60, button="right")
    # The guest's clock on both sides of the deletion brackets it, however slow the guest.
    clicked_at = guest.now()
    guest.click_text("Move to Trash", timeout=30)
    guest.wait_for_file(f"{trash}/info/report.txt.trashinfo", timeout=60)
    gone_at = guest.now()

    diff = guest.fs_snapshot(user.home).diff(before)
    assert document in diff.deleted
    assert {f"{trash}/files/report.txt", f"{trash}/info/report.txt.trashinfo"} <= diff.created
    adare_checks.run(
        "the document is in the Trash", "standard.file_exists",
        path="{{ adare_user_home }}/.local/share/Trash/files/report.txt",
    )  # fmt: skip
    info = guest.succeed(f"cat {trash}/info/report.txt.trashinfo")
    adare_checks.check(f"Path={document}" in info, "the trashinfo names where it was", info)
    stamp = next(line.split("=", 1)[1] for line in info.splitlines() if line.startswith("Deletion"))
    # DeletionDate is the guest's local time (UTC here) in whole seconds, without a zone.
    deletion = datetime.fromisoformat(stamp).replace(tzinfo=gone_at.tzinfo)
    adare_checks.check(
        clicked_at - timedelta(seconds=5) <= deletion <= gone_at + timedelta(seconds=5),
        "DeletionDate is the guest's clock at the deletion, within 5 s",
        f"DeletionDate={stamp}, guest clock {clicked_at.isoformat()} .. {gone_at.isoformat()}",
    )
    thunar.stop()


@XFCE
def test_a_file_opened_from_thunar_in_mousepad_is_recently_used(
    guest: Guest, adare_checks: SoftChecks
) -> None:
    user = guest.user
    a_document(guest)
    recent = f"{user.home}/.local/share/recently-used.xbel"
    thunar = user.start(f"thunar {user.documents}")
    guest.wait_for_window("Documents", timeout=120)
    clicked_at = guest.now()
    guest.click_text("report.txt", timeout=60, clicks=2)
    # Mousepad's title names the file; its start takes seconds to a minute under TCG.
    guest.wait_for_window("report.txt", timeout=180)
    guest.wait_until_succeeds(f"grep -q Documents/report.txt {recent}", timeout=60)
    opened_at = guest.now()

    xbel = guest.succeed(f"cat {recent}")
    entry = re.search(
        r'<bookmark href="file://[^"]*/Documents/report\.txt".*?</bookmark>', xbel, re.S
    )
    assert entry is not None, xbel
    adare_checks.check(
        'name="Mousepad"' in entry.group(0), "the editor is named as the application",
        entry.group(0),
    )  # fmt: skip
    added = re.search(r'added="([^"]+)"', entry.group(0))
    assert added is not None, entry.group(0)
    when = datetime.fromisoformat(added.group(1).replace("Z", "+00:00"))
    adare_checks.check(
        clicked_at - timedelta(seconds=5) <= when <= opened_at + timedelta(seconds=5),
        "added is the guest's clock at the opening, within 5 s",
        f"added={added.group(1)}, guest clock {clicked_at.isoformat()} .. {opened_at.isoformat()}",
    )
    thunar.stop()


@XFCE
def test_the_login_left_a_logind_session_a_wtmp_record_and_journal_lines(guest: Guest) -> None:
    session = guest.user.session()
    assert session is not None, "the desktop user has no logind session"
    assert (session.user, session.session_class, session.type, session.seat) == (
        "user", "user", "x11", "seat0",
    )  # fmt: skip
    assert session.service == "lightdm-autologin" and not session.remote
    assert session.started is not None

    # util-linux's last reads /var/log/wtmp: LightDM wrote the login on the X server's VT.
    logins = guest.succeed("last --time-format iso -w user").splitlines()
    record = next(line for line in logins if line.startswith("user "))
    fields = record.split()
    assert fields[1:3] == ["tty7", ":0"], record
    logged_in = datetime.fromisoformat(fields[3])
    # LightDM writes it once PAM and logind have opened the session and its setup script
    # ran, just before the session's program starts: seconds after logind's time on TCG.
    opened = session.started
    assert opened - timedelta(seconds=1) <= logged_in <= opened + timedelta(seconds=60), record

    # The journal tells the same story: PAM opened the session, logind registered it.
    pam = guest.journal(identifier="lightdm", since=opened - timedelta(seconds=30))
    assert any(
        "session opened for user user" in e.message and "lightdm-autologin" in e.message
        for e in pam
    ), [e.message for e in pam]
    logind = guest.journal(unit="systemd-logind.service")
    assert f"New session {session.id} of user user." in [e.message for e in logind]
