"""Forensic scenario: what does a user's action leave on disk under /home?"""

from pathlib import Path

from pytest_adare.guest import Guest


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
