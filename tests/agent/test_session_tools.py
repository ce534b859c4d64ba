"""``rekey``: a warm-started VM's host installs its own token over the old session."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from adare_guest.config import AgentConfig, load_config
from adare_guest.server import AdareVMServer
from tests.agent.conftest import StrictClient

pytestmark = pytest.mark.asyncio

OLD = "old-token-of-the-saving-vm"
NEW = "new-token-of-this-vm-0123456789"


async def open_client(server: AdareVMServer, token: str) -> StrictClient:
    port = server.listen_address[1]  # type: ignore[index]
    ws = await connect(
        f"ws://127.0.0.1:{port}", additional_headers={"Authorization": f"Bearer {token}"}
    )
    return StrictClient(ws)


async def refused(server: AdareVMServer, token: str) -> int:
    port = server.listen_address[1]  # type: ignore[index]
    with pytest.raises(InvalidStatus) as info:
        async with connect(
            f"ws://127.0.0.1:{port}", additional_headers={"Authorization": f"Bearer {token}"}
        ):
            pass
    return info.value.response.status_code


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"token": OLD, "port": 0, "log_level": "INFO"}))
    os.chmod(run / "config.json", 0o600)
    return run


async def test_rekey_keeps_the_session_and_makes_later_connections_use_the_new_token(
    run_dir: Path,
) -> None:
    server = AdareVMServer(load_config(run_dir, {"host": "127.0.0.1"}))
    await server.start()
    try:
        session = await open_client(server, OLD)
        result = await session.ok("rekey", token=NEW)
        assert result["config_rewritten"] is True
        assert (await session.ok("get_status"))["status"] == "success"  # still served
        assert await refused(server, OLD) == 401
        fresh = await open_client(server, NEW)
        assert (await fresh.ok("get_status"))["status"] == "success"
        await fresh.close()
        await session.close()
    finally:
        await server.stop()
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved == {"token": NEW, "port": 0, "log_level": "INFO"}
    assert stat.S_IMODE((run_dir / "config.json").stat().st_mode) == 0o600
    assert load_config(run_dir).token == NEW  # an agent restarted by the init keeps it


@pytest.mark.parametrize(
    "bad", ["short", "has space in it xxxxxxxx", "x" * 257, "tok\nen-0123456789"]
)
async def test_a_malformed_token_is_refused_and_the_old_one_stays(
    run_dir: Path, bad: str
) -> None:
    server = AdareVMServer(load_config(run_dir, {"host": "127.0.0.1"}))
    await server.start()
    try:
        session = await open_client(server, OLD)
        result = await session.ok("rekey", token=bad)  # a tool-level error, not a protocol one
        assert result["status"] == "error" and "16 to 256" in result["error"]
        again = await open_client(server, OLD)
        await again.close()
        await session.close()
    finally:
        await server.stop()
    assert json.loads((run_dir / "config.json").read_text())["token"] == OLD


async def test_rekey_without_a_config_file_changes_the_running_agent_only(
    tmp_path: Path,
) -> None:
    server = AdareVMServer(AgentConfig(host="127.0.0.1", port=0, token=OLD, run_dir=tmp_path))
    await server.start()
    try:
        session = await open_client(server, OLD)
        assert (await session.ok("rekey", token=NEW))["config_rewritten"] is False
        assert await refused(server, OLD) == 401
        await session.close()
    finally:
        await server.stop()
    assert not (tmp_path / "config.json").exists()


async def test_seed_random_mixes_host_bytes_into_the_kernel_pool(tmp_path: Path) -> None:
    """Real ioctls on this machine's /dev/urandom (adding entropy harms nothing)."""
    server = AdareVMServer(AgentConfig(host="127.0.0.1", port=0, token=OLD, run_dir=tmp_path))
    await server.start()
    try:
        session = await open_client(server, OLD)
        seed = base64.b64encode(os.urandom(64)).decode()
        result = await session.ok("seed_random", data=seed)
        if os.geteuid() == 0:
            assert (result["status"], result["bytes"]) == ("success", 64)
        else:  # both ioctls need CAP_SYS_ADMIN
            assert result["status"] == "error" and "cannot seed the kernel RNG" in result["error"]
        for bad, message in [
            ("not base64!", "data must be base64"),
            (base64.b64encode(b"short").decode(), "16 to 512 bytes"),
            (base64.b64encode(bytes(513)).decode(), "16 to 512 bytes"),
        ]:
            refused_seed = await session.ok("seed_random", data=bad)
            assert refused_seed["status"] == "error" and message in refused_seed["error"]
        await session.close()
    finally:
        await server.stop()
