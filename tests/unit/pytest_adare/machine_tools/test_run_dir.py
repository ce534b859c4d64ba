"""Run folders: what a SIGKILLed process left is removed by the next one to make a folder;
nothing else is (a live maker's, unmarked, badly marked, another user's, a symlink).
Real processes killed with SIGKILL, real files and ownership."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_adare.machine_tools.run_dir import (
    MARK,
    claim_run_dir,
    make_run_dir,
    reap_dead_run_dirs,
)

MAKER = """
import os, signal, sys
from pathlib import Path
from pytest_adare.machine_tools.run_dir import make_run_dir
path = make_run_dir("adare-vm0-", Path(sys.argv[1]))
(path / "console.log").write_text("the VM's console")
(path / "sub").mkdir()
(path / "sub" / "agent.sock").write_text("")
print(path, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()  # lives until the test closes its stdin
"""


def _made_by_a_killed_process(root: Path) -> Path:
    done = subprocess.run([sys.executable, "-c", MAKER, str(root), "kill"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    return Path(done.stdout.strip())


def test_a_killed_makers_folder_goes_when_the_next_is_made(tmp_path: Path) -> None:
    left = _made_by_a_killed_process(tmp_path)
    assert (left / "sub" / "agent.sock").exists()  # SIGKILL ran no finalizer
    new = make_run_dir("adare-vm0-", tmp_path)
    assert not left.exists()
    assert new.exists() and stat.S_IMODE(new.stat().st_mode) == 0o700
    mark = (new / MARK).read_text().split()
    assert int(mark[0]) == os.getpid() and stat.S_IMODE((new / MARK).stat().st_mode) == 0o600
    assert [int(mark[2]), mark[3]] == list(_here())  # its pid namespace, this boot


def _end(child: subprocess.Popen[str]) -> None:
    """Let a child that waits on its stdin end, and close its pipes."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.close()
    child.wait(timeout=30)
    child.stdout.close()


def test_a_live_makers_folder_stays(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", MAKER, str(tmp_path), "live"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        theirs = Path(child.stdout.readline().strip())
        mine = make_run_dir("adare-lan0-", tmp_path)
        assert reap_dead_run_dirs(tmp_path) == []
        assert theirs.exists() and mine.exists()
    finally:
        _end(child)
    assert reap_dead_run_dirs(tmp_path) == [theirs]  # its maker ended: now it goes
    assert mine.exists()


def _marked(tmp_path: Path, name: str, pid: int, start: int, namespace: int, boot: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / MARK).write_text(f"{pid} {start} {namespace} {boot}\n")
    return folder


def _here() -> tuple[int, str]:
    return (os.stat("/proc/self/ns/pid").st_ino,
            Path("/proc/sys/kernel/random/boot_id").read_text().strip())  # fmt: skip


def test_a_reused_pid_is_not_the_maker(tmp_path: Path) -> None:
    # This very process, as if it had been another one with the same pid.
    namespace, boot = _here()
    folder = _marked(tmp_path, "adare-vm0-reused", os.getpid(), 1, namespace, boot)
    assert reap_dead_run_dirs(tmp_path) == [folder]


def test_a_maker_of_an_earlier_boot_is_gone_one_in_another_pid_namespace_is_a_doubt(
    tmp_path: Path,
) -> None:
    namespace, boot = _here()
    mine = (os.getpid(), int(_mark_fields(make_run_dir("adare-vm0-", tmp_path))[1]))
    earlier = _marked(tmp_path, "adare-vm0-earlier", *mine, namespace,
                      "00000000-0000-4000-8000-000000000000")  # fmt: skip
    # A container sharing /tmp: pid 2 there is not this host's pid 2, nor known here.
    elsewhere = _marked(tmp_path, "adare-vm0-container", 2, 1, namespace + 1, boot)
    assert reap_dead_run_dirs(tmp_path) == [earlier]
    assert elsewhere.exists()


def _mark_fields(folder: Path) -> list[str]:
    return (folder / MARK).read_text().split()


@pytest.mark.parametrize(
    "mark",
    [None, "", "garbage\n", "12 34 56\n", "-5 0\n", "1" * 100 + " 0\n", "fifo", "symlink"],
    ids=["none", "empty", "words", "three", "negative", "long", "fifo", "symlink"],
)
def test_a_folder_without_a_valid_mark_stays(tmp_path: Path, mark: str | None) -> None:
    dead = _made_by_a_killed_process(tmp_path)
    folder = tmp_path / "adare-vm0-other"
    folder.mkdir()
    if mark == "fifo":
        os.mkfifo(folder / MARK)  # read without blocking, and refused
    elif mark == "symlink":
        (folder / MARK).symlink_to(dead / MARK)  # a dead maker's mark, through a link
    elif mark is not None:
        (folder / MARK).write_text(mark)
    assert reap_dead_run_dirs(tmp_path) == [dead]
    assert folder.exists()


def test_only_folders_named_as_run_folders_are_looked_at(tmp_path: Path) -> None:
    dead = _made_by_a_killed_process(tmp_path)
    elsewhere = tmp_path / "mine-not-adare"
    dead.rename(elsewhere)
    assert reap_dead_run_dirs(tmp_path) == []
    assert elsewhere.exists()
    with pytest.raises(ValueError, match="prefix starts with 'adare-'"):
        make_run_dir("vm0-", tmp_path)


def test_a_symlink_to_a_dead_makers_folder_is_not_followed(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    dead = _made_by_a_killed_process(hidden)
    link = tmp_path / "adare-vm0-link"
    link.symlink_to(dead)
    assert reap_dead_run_dirs(tmp_path) == []
    assert link.is_symlink() and (dead / "console.log").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_folder_stays_whatever_its_mark(tmp_path: Path) -> None:
    theirs = _made_by_a_killed_process(tmp_path)
    os.chown(theirs, 65534, 65534)
    in_mine = _made_by_a_killed_process(tmp_path)
    os.chown(in_mine / MARK, 65534, 65534)  # a mark another user wrote
    assert reap_dead_run_dirs(tmp_path) == []
    assert theirs.exists() and in_mine.exists()


def test_a_claimed_folder_goes_with_its_claimant_not_its_maker(tmp_path: Path) -> None:
    made = make_run_dir("adare-kept-", tmp_path)  # pytest makes it
    claimant = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; "
         "from pytest_adare.machine_tools.run_dir import claim_run_dir; "
         "claim_run_dir(Path(sys.argv[1])); print('claimed', flush=True); sys.stdin.read()",
         str(made)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert claimant.stdout is not None
        assert claimant.stdout.readline().strip() == "claimed"
        assert int((made / MARK).read_text().split()[0]) == claimant.pid
        assert sorted(p.name for p in made.iterdir()) == [MARK]  # no staged mark left
    finally:
        _end(claimant)
    assert reap_dead_run_dirs(tmp_path) == [made]
    claim_run_dir(make_run_dir("adare-kept-", tmp_path))  # claiming one's own: no error
