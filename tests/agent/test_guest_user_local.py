"""``guest.user``, ``shell(background=True)`` and adare's automatic variables, against the
real agent on localhost (as root, as in a guest: it switches to the user it is asked for)."""

from __future__ import annotations

import pwd
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from adare_guest.config import AgentConfig
from adare_guest.server import AdareVMServer
from adare_guest.testfunctions import automatic_variables
from pytest_adare.agent.websocket_client import AgentClient
from pytest_adare.guest import AsyncGuest, Guest
from pytest_adare.guest_user import AsyncGuestUser
from pytest_adare.loop_thread import shared_loop

TOKEN = "user-test-token"

CHECKS = '''
from adare_guest.testfunctions import TestContext, testfunction

@testfunction()
def show(ctx: TestContext) -> str:
    names = sorted(k for k in ctx.variables if k.startswith("adare_"))
    return "|".join(f"{k}={ctx.variable(k)}" for k in names)
'''


@pytest.fixture
def agent_config(tmp_path: Path) -> AgentConfig:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return AgentConfig(host="127.0.0.1", port=0, run_dir=run_dir, token=TOKEN)


@pytest_asyncio.fixture
async def aguest(agent: AdareVMServer) -> AsyncIterator[AsyncGuest]:
    assert agent.listen_address is not None
    client = await AgentClient.connect("127.0.0.1", agent.listen_address[1], TOKEN)
    yield AsyncGuest(client)
    await client.close()


@pytest.mark.asyncio
async def test_background_shell_returns_at_once_with_a_pid_and_an_output_file(
    aguest: AsyncGuest,
) -> None:
    started = await aguest.shell("echo started; sleep 0.3; echo done", background=True)
    assert started.pid is not None and started.pid > 0 and started.stdout_path is not None
    done = await aguest.wait_until_succeeds(f"grep -q done {started.stdout_path}", timeout=10)
    assert done.ok
    assert (await aguest.shell(f"cat {started.stdout_path}")).stdout == "started\ndone\n"


@pytest.mark.asyncio
async def test_without_a_session_or_a_named_user_the_user_is_root(aguest: AsyncGuest) -> None:
    info = await aguest.user.info()
    assert (info.name, info.uid, info.home) == ("root", 0, pwd.getpwnam("root").pw_dir)
    assert info.dirs["DOCUMENTS"] == f"{info.home}/Documents"
    assert info.dirs["DOWNLOAD"] == f"{info.home}/Downloads"
    assert info.env["LANG"] == "C.UTF-8"
    assert (await aguest.user.run("echo $LANG")).stdout == "C.UTF-8\n"


@pytest.mark.asyncio
async def test_a_named_user_runs_and_starts_programs_as_itself(aguest: AsyncGuest) -> None:
    nobody = pwd.getpwnam("nobody")
    user = AsyncGuestUser(aguest.shell, "nobody")
    ran = await user.run("id -u; echo $HOME $USER $LANG", cwd="/")
    assert ran.stdout == f"{nobody.pw_uid}\n{nobody.pw_dir} nobody C.UTF-8\n"
    program = await user.start("echo up; exec sleep 30", cwd="/")
    assert await program.running()
    owner = await aguest.shell(f"ps -o user= -p {program.pid}")
    assert owner.stdout.strip() in ("nobody", str(nobody.pw_uid))
    await aguest.wait_until_succeeds(f"grep -q up {program.output_path}", timeout=10)
    assert await program.output() == "up\n"
    await program.stop()
    assert not await program.running()


def test_the_sync_user_has_the_same_answers(shared_loop_agent: AdareVMServer) -> None:
    assert shared_loop_agent.listen_address is not None
    port = shared_loop_agent.listen_address[1]
    client = shared_loop().run(AgentClient.connect("127.0.0.1", port, TOKEN), timeout=30)
    guest = Guest(AsyncGuest(client))
    try:
        assert (guest.user.name, guest.user.uid) == ("root", 0)
        assert guest.user.documents == f"{guest.user.home}/Documents"
        assert guest.user.desktop == f"{guest.user.home}/Desktop"
        assert guest.user.downloads == guest.user.dirs["DOWNLOAD"]
        program = guest.user.start("exec sleep 30")
        assert program.running()
        program.stop()
        assert not program.running()
    finally:
        shared_loop().run(client.close(), timeout=30)


@pytest.mark.asyncio
async def test_every_run_test_sees_the_automatic_variables_under_its_own(
    aguest: AsyncGuest, tmp_path: Path, agent_config: AgentConfig
) -> None:
    collection = tmp_path / "autovars"
    collection.mkdir()
    (collection / "autovars.py").write_text(CHECKS)
    await aguest.upload_testfunctions(collection)
    shown = (await aguest.run_test("autovars.show")).details[0]
    home = pwd.getpwnam("root").pw_dir
    assert f"adare_user_home={home}|adare_username=root" in shown
    assert f"adare_user_documents={home}/Documents" in shown
    assert f"adare_run_dir={agent_config.run_dir}" in shown and "adare_os=linux" in shown
    await aguest.set_variables({"adare_os": "custom"})
    assert "adare_os=custom" in (await aguest.run_test("autovars.show")).details[0]


def test_the_automatic_user_is_the_desktop_sessions(tmp_path: Path) -> None:
    session = tmp_path / "session.env"
    session.write_text("USER=nobody\nDISPLAY=:0\n")
    found = automatic_variables("/adare/run", str(session))
    home = pwd.getpwnam("nobody").pw_dir
    assert found["adare_username"] == "nobody" and found["adare_user_home"] == home
    assert found["adare_user_desktop"] == f"{home}/Desktop"
    assert found["adare_user_downloads"] == f"{home}/Downloads"
    assert found["adare_temp_dir"] and found["adare_run_dir"] == "/adare/run"
