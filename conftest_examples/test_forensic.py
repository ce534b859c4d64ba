"""Forensic scenario: what does a user's action leave on disk under /home?"""

from pathlib import Path

from pytest_adare.guest import Guest
from pytest_adare.plugin.checks import SoftChecks


def test_create_modify_delete_shows_in_the_diff(guest: Guest, adare_artifacts: Path) -> None:
    guest.shell(
        "mkdir -p /home/user && echo draft > /home/user/notes.txt "
        "&& echo keep > /home/user/report.txt && echo trash > /home/user/old.txt"
    ).check()
    before = guest.fs_snapshot("/home", hash=True)

    guest.shell(
        "echo secret > /home/user/new.txt && echo final >> /home/user/notes.txt "
        "&& rm /home/user/old.txt"
    ).check()
    diff = guest.fs_snapshot("/home", hash=True).diff(before)

    assert diff.created == {"/home/user/new.txt"}
    assert diff.deleted == {"/home/user/old.txt"}
    assert "/home/user/notes.txt" in diff.modified
    assert "/home/user/report.txt" not in diff.modified
    exported = diff.export(adare_artifacts / "home-diff.json", "json")
    assert exported.stat().st_size > 0


def test_every_artifact_gets_a_verdict(guest: Guest, adare_checks: SoftChecks) -> None:
    """Soft checks: each artifact is judged and reported, one failure does not hide the rest."""
    written_at = guest.now()
    guest.succeed("mkdir -p /home/user && echo quarterly > /home/user/report.txt")
    guest.wait_for_file("/home/user/report.txt")

    adare_checks.run("report written", "standard.file_exists", path="/home/user/report.txt")
    adare_checks.run(
        "report content", "standard.content_equals", path="/home/user/report.txt",
        expected="quarterly\n",
    )  # fmt: skip
    adare_checks.run(
        "written when the test wrote it", "standard.timestamp_within",
        path="/home/user/report.txt", expected=written_at.timestamp(), tolerance=5,
    )  # fmt: skip
    adare_checks.run("no draft left", "standard.file_absent", path="/home/user/draft.txt")
    adare_checks.check(guest.now() >= written_at, "the guest's clock went forward")
