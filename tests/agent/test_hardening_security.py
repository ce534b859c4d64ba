"""Secure by default (issue 12, defects 6 and 8): no token means loopback only, the
token file is private, and odd handshakes are refused with 401, never 500."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from adare_guest.cli import parse_args
from adare_guest.config import AgentConfig, load_config
from adare_guest.server import AdareVMServer

RECIPE = Path(__file__).resolve().parents[2] / "pytest_adare" / "image" / "recipe"
INSTALL_PRIVATE = '. "$1" && umask 022 && install_private "$2" "$3"'


@pytest_asyncio.fixture
async def token_agent(tmp_path: Path) -> AsyncIterator[AdareVMServer]:
    server = AdareVMServer(AgentConfig(host="127.0.0.1", port=0, token="s3cret", run_dir=tmp_path))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "headers",
    [
        [("Authorization", "Bearer s3cret"), ("Authorization", "Bearer s3cret")],
        [("Authorization", "Bearer s3cret"), ("Authorization", "Bearer other")],
        [("Authorization", "Bearer s3cr\u00e9t")],
    ],
    ids=["duplicate", "conflicting", "non-ascii"],
)
async def test_odd_authorization_headers_get_401_not_500(
    token_agent: AdareVMServer, headers: list[tuple[str, str]]
) -> None:
    port = token_agent.listen_address[1]  # type: ignore[index]
    with pytest.raises(InvalidStatus) as refused:
        await connect(f"ws://127.0.0.1:{port}", additional_headers=headers)
    assert refused.value.response.status_code == 401


@pytest.mark.asyncio
async def test_the_right_token_still_gets_in(token_agent: AdareVMServer) -> None:
    port = token_agent.listen_address[1]  # type: ignore[index]
    headers = {"Authorization": "Bearer s3cret"}
    async with connect(f"ws://127.0.0.1:{port}", additional_headers=headers) as ws:
        assert "Connected" in str(await ws.recv())


@pytest.mark.asyncio
async def test_without_a_token_the_agent_listens_on_loopback_only_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = AdareVMServer(AgentConfig(host="0.0.0.0", port=0, run_dir=tmp_path))
    with caplog.at_level(logging.WARNING, logger="adare_guest.server"):
        await server.start()
    try:
        assert server._server is not None
        bound = {sock.getsockname()[0] for sock in server._server.sockets}
        assert bound == {"127.0.0.1"} and server.listen_address[0] == "127.0.0.1"  # type: ignore[index]
        assert any(
            r.levelno == logging.WARNING and "no token" in r.getMessage() for r in caplog.records
        )
    finally:
        await server.stop()


@pytest.mark.asyncio
@pytest.mark.parametrize("token", [None, "t0ken"], ids=["opt-in", "token"])
async def test_with_a_token_or_the_opt_in_the_agent_binds_where_told(
    tmp_path: Path, token: str | None
) -> None:
    config = AgentConfig(host="0.0.0.0", port=0, token=token, run_dir=tmp_path)
    config.insecure_listen_any = token is None
    server = AdareVMServer(config)
    await server.start()
    try:
        assert server._server is not None
        assert {sock.getsockname()[0] for sock in server._server.sockets} == {"0.0.0.0"}
    finally:
        await server.stop()


def test_the_opt_in_comes_from_the_flag_or_the_config_file(tmp_path: Path) -> None:
    args = parse_args([str(tmp_path), "--insecure-listen-any"])
    assert args["insecure_listen_any"] is True
    assert parse_args([str(tmp_path)])["insecure_listen_any"] is None
    (tmp_path / "config.json").write_text('{"insecure_listen_any": true}')
    assert load_config(tmp_path).insecure_listen_any is True
    (tmp_path / "config.json").write_text('{"insecure_listen_any": "yes"}')
    with pytest.raises(ValueError, match="insecure_listen_any"):
        load_config(tmp_path)


def test_a_config_file_others_can_read_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"token": "t"}')
    os.chmod(path, 0o644)
    config = load_config(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.notices and "readable by others" in config.notices[0]
    assert load_config(tmp_path).notices == []


def test_the_image_init_writes_the_config_owner_only(tmp_path: Path) -> None:
    """``install_private`` (sysinit's fw_cfg hand-off) over a world-readable old copy."""
    source, dest = tmp_path / "raw", tmp_path / "config.json"
    source.write_text('{"token": "t"}')
    dest.write_text("old")
    os.chmod(dest, 0o644)
    subprocess.run(
        ["sh", "-c", INSTALL_PRIVATE, "sh", str(RECIPE / "lib.sh"), str(source), str(dest)],
        check=True,
    )
    assert dest.read_text() == '{"token": "t"}' and stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert "install_private" in (RECIPE / "sysinit.sh").read_text()
    initrd = (RECIPE / "initrd-init.sh").read_text()
    assert "umask 077" in initrd and "chmod 600 /newroot/adare/run/config.json.new" in initrd
