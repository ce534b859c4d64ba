"""``rekey`` ends every other session that logged in with the old token (issue 27,
item 13): whoever read the token from a saved state and connected between ``loadvm``
and the host's ``rekey`` loses the session there, before it can run anything more."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from adare_guest.config import load_config
from adare_guest.server import AdareVMServer

pytestmark = pytest.mark.asyncio
OLD = "old-token-of-the-saving-vm"
NEW = "new-token-of-this-vm-0123456789"


async def logged_in(server: AdareVMServer, token: str) -> ClientConnection:
    port = server.listen_address[1]  # type: ignore[index]
    headers = {"Authorization": f"Bearer {token}"}
    return await connect(f"ws://127.0.0.1:{port}", additional_headers=headers)


async def call(ws: ClientConnection, tool: str, **params: object) -> dict[str, object]:
    call_id = os.urandom(4).hex()
    message = {"type": "tool_call", "id": call_id, "timestamp": None, "tool": tool}
    await ws.send(json.dumps({**message, "params": params}))
    while True:
        answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if answer["type"] == "tool_result" and answer["id"] == call_id:
            return dict(answer)


async def test_rekey_closes_every_other_session_of_the_old_token(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"token": OLD, "port": 0}))
    os.chmod(tmp_path / "config.json", 0o600)
    server = AdareVMServer(load_config(tmp_path, {"host": "127.0.0.1"}))
    await server.start()
    try:
        intruder = await logged_in(server, OLD)
        host = await logged_in(server, OLD)
        assert (await call(intruder, "get_status"))["success"]
        # The intruder's long command is running when the host rekeys.
        marker = tmp_path / "still-running"
        await intruder.send(
            json.dumps(
                {
                    "type": "tool_call",
                    "id": "slow",
                    "timestamp": None,
                    "tool": "execute_shell",
                    "params": {"shell_command": f"sleep 3; touch {marker}", "timeout": 30},
                }
            )
        )
        await asyncio.sleep(0.5)
        assert (await call(host, "rekey", token=NEW))["success"]

        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(intruder.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert (await call(host, "get_status"))["success"]  # the rekeying session stays
        await asyncio.sleep(3.5)
        assert not marker.exists(), "the old session's command went on after the rekey"
        assert len(server.sessions) == 1
        await host.close()
    finally:
        await server.stop()


async def test_a_connection_accepted_with_the_old_token_just_before_a_rekey_is_closed(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"token": OLD, "port": 0}))
    os.chmod(tmp_path / "config.json", 0o600)
    server = AdareVMServer(load_config(tmp_path, {"host": "127.0.0.1"}))
    await server.start()
    assert server._server is not None
    check = server._server.process_request
    assert check is not None

    def rekeyed_right_after_the_check(request: object, peer: object) -> object:
        answer = check(request, peer)  # type: ignore[arg-type]
        server.config.token = NEW  # the host's rekey lands before the session opens
        return answer

    server._server.process_request = rekeyed_right_after_the_check  # type: ignore[assignment]
    try:
        late = await logged_in(server, OLD)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(late.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert server.sessions == set()
    finally:
        await server.stop()
