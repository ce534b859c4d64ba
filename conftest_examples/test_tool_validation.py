"""The adare paper's tool validation: the scenario is the ground truth, a forensic tool's
findings are scored against it.

The user deletes a document in the file manager, or opens it in the editor (the recipe
image of test_file_manager.py); the test says what Dissect's ``trash`` and
``recentlyused`` plugins must report (on the XFCE desktop, ``debian-xfce``: what its
``wtmp`` and ``journal`` plugins must report of the display manager's login), exports
the disk once and scores each ``--adare-tool`` version
(``--adare-tool=dissect.target==3.23.1 --adare-tool=dissect.target==3.25.1``; without
it the installed version). The Sleuth
Kit's ``fls`` is scored against the file system diff. The report holds the table.
"""

from datetime import timedelta
from pathlib import Path

import pytest
import tool_analysis

from pytest_adare.analysis import parse_fls, run_tool
from pytest_adare.analysis.validation import ToolValidation
from pytest_adare.guest import Guest
from pytest_adare.vm import VM

RECIPE = Path(__file__).parent / "fm_desktop" / "fm-desktop.toml"


@pytest.mark.adare_vm(image=str(RECIPE), gui=True)
def test_the_file_deleted_in_the_file_manager_is_in_dissects_trash_and_in_fls(
    guest: Guest, adare_guest_vm: VM, ground_truth: ToolValidation, tmp_path: Path
) -> None:
    user = guest.user
    report = f"{user.documents}/report.txt"
    trash = f"{user.home}/.local/share/Trash"
    before = guest.fs_snapshot(user.home)
    manager = user.start(f"pcmanfm {user.documents}")
    guest.wait_for_window("Documents", timeout=60)
    guest.click_text("report.txt", timeout=60, button="right")
    clicked_at = guest.now()
    guest.click_text("Move to Trash", timeout=30)
    guest.wait_for_text("report.txt", timeout=30, gone=True)
    gone_at = guest.now()
    # Deleted between the click and the name leaving the window: the truth is that span.
    deleted_at = clicked_at + (gone_at - clicked_at) / 2
    span = (gone_at - clicked_at).total_seconds() / 2
    guest.wait_for_file(f"{trash}/info/report.txt.trashinfo", timeout=30)
    diff = guest.fs_snapshot(user.home).diff(before)
    manager.stop()

    ground_truth.expect("trash", path=report, deleted_path=f"{trash}/files/report.txt",
                        ts=deleted_at, tolerance=span + 5)  # fmt: skip
    disk = adare_guest_vm.export_disk(tmp_path / "disk.raw")
    for tool, score in ground_truth.validate(tool_analysis.trash, disk).items():
        assert [o.verdict for o in score.outcomes] == ["found"], (tool, score.outcomes)

    ground_truth.expect_fs_diff(diff, under=user.home)
    found = run_tool(["fls", "-r", "-p", "{disk}"], evidence=disk, kind="file",
                     parser=lambda text: parse_fls(text, under=user.home))  # fmt: skip
    fls = ground_truth.score(found, tool="fls")
    created = {o.expectation.identify["path"] for o in fls.found}
    assert {f"{trash}/files/report.txt", f"{trash}/info/report.txt.trashinfo"} <= created
    # The move to the Trash is a rename: whether fls still lists the old name as a
    # deleted entry is what this scenario measures (the report's table says), not a rule.


@pytest.mark.adare_vm(image=str(RECIPE), gui=True)
def test_the_file_opened_in_the_editor_is_in_dissects_recently_used(
    guest: Guest, adare_guest_vm: VM, ground_truth: ToolValidation, tmp_path: Path
) -> None:
    user = guest.user
    recent = f"{user.home}/.local/share/recently-used.xbel"
    manager = user.start(f"pcmanfm {user.documents}")
    guest.wait_for_window("Documents", timeout=60)
    guest.click_text("report.txt", timeout=60)  # selected
    clicked_at = guest.now()
    # Enter opens the selection: two clicks under a loaded TCG guest can arrive too far
    # apart to be a double click (the file stayed selected, no editor).
    guest.keyboard.press("enter")
    # The editor's title names the file; its first start under a loaded TCG guest was seen
    # to take over a minute (GTK's caches are built on first use).
    guest.wait_for_window("report.txt", timeout=180)
    shown_at = guest.now()
    # Opened between the double click and the editor's window: the truth is that span.
    opened_at = clicked_at + (shown_at - clicked_at) / 2
    span = (shown_at - clicked_at).total_seconds() / 2
    guest.wait_until_succeeds(f"grep -q Documents/report.txt {recent}", timeout=30)
    manager.stop()

    ground_truth.expect("recentlyused", href=f"file://{user.documents}/report.txt",
                        user=user.name, added=opened_at, tolerance=span + 5)  # fmt: skip
    disk = adare_guest_vm.export_disk(tmp_path / "disk.raw")
    for tool, score in ground_truth.validate(tool_analysis.recently_used, disk).items():
        assert [o.verdict for o in score.outcomes] == ["found"], (tool, score.outcomes)


@pytest.mark.adare_vm(image="debian-xfce", gui=True)
def test_the_display_managers_login_is_in_dissects_wtmp_and_journal(
    guest: Guest, adare_guest_vm: VM, ground_truth: ToolValidation, tmp_path: Path
) -> None:
    # The truth is logind's: the session LightDM opened at boot, and when.
    session = guest.user.session()
    assert session is not None and session.started is not None, "no logind session"
    opened = session.started
    # LightDM writes the wtmp record once the session's setup script ran, just before the
    # session's program starts: seconds after logind's time under TCG.
    ground_truth.expect("wtmp", ut_type="USER_PROCESS", ut_user=session.user, ut_line="tty7",
                        ut_host=session.display, ts=opened, tolerance=60)  # fmt: skip
    ground_truth.expect("journal", syslog_identifier="systemd-logind",
                        message=f"New session {session.id} of user {session.user}.",
                        ts=opened, tolerance=5)  # fmt: skip
    # PAM's line says it in its own words; its text is what journalctl reads, its time
    # is again logind's.
    lightdm = guest.journal(identifier="lightdm", since=opened - timedelta(seconds=30))
    pam = [
        e.message
        for e in lightdm
        if "session opened for user" in e.message and session.service in e.message
    ]
    assert pam, "journalctl shows no PAM line for the login"
    ground_truth.expect("journal", syslog_identifier="lightdm", message=pam[0], ts=opened,
                        tolerance=5)  # fmt: skip

    disk = adare_guest_vm.export_disk(tmp_path / "disk.raw")
    for tool, score in ground_truth.validate(tool_analysis.login, disk).items():
        assert [o.verdict for o in score.outcomes] == ["found"] * 3, (tool, score.outcomes)
