"""The registry of ``adare-vm`` against a hostile second local user (no VM boots; issue 34).

Without ``XDG_RUNTIME_DIR`` the registry was ``/tmp/adare-vm-registry-<uid>``: another
user who made that directory first locked the victim out of ``adare-vm`` for good (``is
not a directory of uid N: not using it``). Here a planter user makes it, and
``/tmp/adare-vm`` for a victim whose ``XDG_RUNTIME_DIR`` is ``/tmp`` (not private), before
the victim's first use; the victim's ``adare-vm list`` still works and its entries land in
a directory only it controls, which the planter can neither list nor fill. A private
``XDG_RUNTIME_DIR`` is still the place. CI runs as root, so the module makes both users
(``useradd``) and acts as them with ``setpriv``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from unprivileged import OrdinaryUser, ensure_user, ordinary_user

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
    reason="making two ordinary users for the test needs root, useradd and setpriv",
)
WAIT = 60.0

# As the victim: claim a name as adare-vm run does, say where it landed, forget it.
CLAIM = """
import json, os
from pytest_adare.interactive import registry
entry = registry.claim(
    "vm", registry.Entry(name="", image="probe", owner="probe", owner_pid=os.getpid())
)
print(json.dumps({"dir": str(registry.registry_dir()), "name": entry.name,
                  "listed": [e.name for e in registry.entries()]}))
registry.remove(entry.name)
"""

# As the planter: take the victim's names first, open to everyone.
PLANT = """
import os, sys
for path in sys.argv[1:]:
    os.mkdir(path)
    os.chmod(path, 0o777)
"""

# As the planter: look into the victim's registry.
PEEK = """
import os, sys
try:
    print(os.listdir(sys.argv[1]))
except PermissionError:
    print("denied")
"""


@dataclass(frozen=True)
class Users:
    victim: OrdinaryUser
    planter: OrdinaryUser
    base: Path


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    base = Path(tempfile.mkdtemp(prefix="adare-registry-users-"))
    try:
        victim = ordinary_user("adare-victim", base)
        entry = ensure_user("adare-planter")
        planter = replace(
            victim, name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=Path(entry.pw_dir)
        )
        yield Users(victim, planter, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_as(user: OrdinaryUser, users: Users, code: str, *args: str, env: dict[str, str]) -> str:
    done = user.run(
        ["python", "-c", code, *args], cache=users.base, cwd=users.base, timeout=WAIT, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def planted(users: Users) -> Iterator[list[Path]]:
    """The planter's directories where the victim's registry used to be looked for."""
    paths = [Path(f"/tmp/adare-vm-registry-{users.victim.uid}"), Path("/tmp/adare-vm")]
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    try:
        run_as(users.planter, users, PLANT, *map(str, paths), env={})
        assert all(path.stat().st_uid == users.planter.uid for path in paths)
        yield paths
    finally:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("runtime", [None, "/tmp"], ids=["no-XDG_RUNTIME_DIR", "a-shared-one"])
def test_a_planted_registry_directory_does_not_lock_the_victim_out(
    users: Users, planted: list[Path], runtime: str | None
) -> None:
    env = {} if runtime is None else {"XDG_RUNTIME_DIR": runtime}
    listing = users.victim.run(
        ["python", "-m", "pytest_adare.interactive.cli", "list"],
        cache=users.base, cwd=users.base, timeout=WAIT, env=env,
    )  # fmt: skip
    assert (listing.returncode, listing.stderr) == (0, ""), listing.stderr
    assert "no running VMs" in listing.stdout

    claimed = json.loads(run_as(users.victim, users, CLAIM, env=env))
    directory = Path(claimed["dir"])
    assert directory == users.victim.home / ".local/state/adare-vm"
    info = directory.lstat()
    assert (info.st_uid, info.st_mode & 0o777) == (users.victim.uid, 0o700)
    assert claimed["listed"] == [claimed["name"]]
    assert claimed["name"].startswith("vm0")
    for path in planted:  # nothing of the victim's went where the planter can read
        assert list(path.iterdir()) == []
    assert run_as(users.planter, users, PEEK, str(directory), env={}).strip() == "denied"


def test_a_private_runtime_directory_is_still_the_registrys_place(users: Users) -> None:
    runtime = users.base / "victim-runtime"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, users.victim.uid, users.victim.gid)
    try:
        claimed = json.loads(
            run_as(users.victim, users, CLAIM, env={"XDG_RUNTIME_DIR": str(runtime)})
        )
        assert claimed["dir"] == str(runtime / "adare-vm")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(runtime)
