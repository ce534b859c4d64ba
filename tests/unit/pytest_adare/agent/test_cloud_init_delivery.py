"""The cloud-init NoCloud seed, and the choice between QGA, cloud-init and neither.

The seed ISO is read back with ``blkid`` (what cloud-init's ds-identify uses to find it)
and with pycdlib's reader; the delivery race runs over a console log file written as a
booting guest would write it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from pytest_adare.agent import delivery
from pytest_adare.agent.cloud_init import user_data, write_seed
from pytest_adare.agent.delivery import await_delivery
from pytest_adare.agent.install import FIREWALL_SCRIPT, GuestLayout
from pytest_adare.errors import AgentUnreachable
from pytest_adare.image.agent_bundle import AgentBundle

LINUX = GuestLayout("linux", "/adare/run", "/dev/ttyS1")


@pytest.fixture
def bundle(tmp_path: Path) -> AgentBundle:
    path = tmp_path / "bundle.pyz"
    path.write_bytes(bytes(range(256)) * 40)
    return AgentBundle(path, "0" * 64, "1" * 64, "1.2.3")


def _read_iso(iso_path: Path) -> dict[str, bytes]:
    iso = pycdlib.PyCdlib()
    iso.open(str(iso_path))
    files = {}
    for name in ("user-data", "meta-data"):
        out = io.BytesIO()
        iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
        files[name] = out.getvalue()
    iso.close()
    return files


def test_the_seed_is_a_cidata_volume_holding_the_agent_and_its_private_config(
    tmp_path: Path, bundle: AgentBundle
) -> None:
    config = {"token": "secret", "port": 18765}
    seed = write_seed(tmp_path / "vm" / "cidata.iso", LINUX, bundle, config, instance_id="i-1")
    assert seed.stat().st_mode & 0o777 == 0o600
    blkid = shutil.which("blkid") or "/usr/sbin/blkid"
    probe = subprocess.run([blkid, "-p", "-o", "export", str(seed)], capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert "LABEL=cidata" in probe.splitlines() and "TYPE=iso9660" in probe.splitlines()
    files = _read_iso(seed)
    assert json.loads(files["meta-data"])["instance-id"] == "i-1"
    text = files["user-data"].decode()
    assert text.startswith("#cloud-config\n")
    document = json.loads(text.split("\n", 1)[1])
    written = {entry["path"]: entry for entry in document["write_files"]}
    assert written["/adare/run/config.json"]["permissions"] == "0600"
    assert json.loads(written["/adare/run/config.json"]["content"]) == config
    assert written["/adare/agent/bundle.pyz"]["encoding"] == "b64"
    unit = written["/etc/systemd/system/adare-agent.service"]["content"]
    assert "ExecStart=/usr/bin/env python3 /adare/agent/bundle.pyz /adare/run" in unit
    assert "DefaultDependencies=no" in unit  # not held until cloud-init's stage ends
    # Started from cloud-init's first stage, by a unit that waits for the last file
    # written, opens the firewall (adare_guest.firewall) and then starts the agent.
    assert "runcmd" not in document
    assert list(written)[-1] == "/adare/agent/seed-written"
    [command] = document["bootcmd"]
    assert command[:4] == ["systemd-run", "--no-block", "--unit=adare-agent-start",
                           "--property=DefaultDependencies=no"]  # fmt: skip
    script = command[-1]
    assert written["/adare/agent/firewall.py"]["content"] == FIREWALL_SCRIPT
    assert (
        script.index("/adare/agent/seed-written")
        < script.index("python3 /adare/agent/firewall.py 18765")
        < script.index("systemctl start --no-block adare-agent.service")
    )


def test_user_data_carries_the_bundle_byte_for_byte() -> None:
    data = bytes(range(256))
    document = json.loads(user_data(LINUX, data, {}).split("\n", 1)[1])
    assert base64.b64decode(document["write_files"][0]["content"]) == data


async def _never() -> None:
    await asyncio.sleep(3600)


async def _answers_after(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _ping(listening_after: float) -> Any:
    started = asyncio.get_event_loop().time()

    async def ping(path: Path, timeout: float) -> dict[str, Any]:
        return {"listening": asyncio.get_event_loop().time() - started >= listening_after}

    return ping


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "_POLL", 0.01)
    monkeypatch.setattr(delivery, "QGA_GRACE", 0.05)
    monkeypatch.setattr(delivery, "CLOUD_INIT_GRACE", 0.05)


@pytest.mark.asyncio
async def test_qga_answering_wins(tmp_path: Path, fast: None) -> None:
    log = tmp_path / "console.log"
    log.write_text("booting\n")
    channel = await await_delivery(
        lambda: _answers_after(0.02), seed=True, console_log=log,
        serial_path=tmp_path / "s", ping=_ping(10),
    )  # fmt: skip
    assert channel == "qga"


@pytest.mark.asyncio
async def test_the_agent_cloud_init_started_wins_without_qga(tmp_path: Path, fast: None) -> None:
    log = tmp_path / "console.log"
    log.write_text("Cloud-init v. 22.4.2 running 'init' at ...\n")
    channel = await await_delivery(
        _never, seed=True, console_log=log, serial_path=tmp_path / "s", ping=_ping(0.05)
    )
    assert channel == "cloud-init"


@pytest.mark.parametrize(
    ("console", "seed", "says"),
    [
        ("Debian GNU/Linux 12 distro ttyS0\n\ndistro login: ", True,
         "cloud-init did not run (not installed, or disabled)"),
        ("Cloud-init v. 22.4.2 running 'init'\nCloud-init v. 22.4.2 finished at x\n"
         "distro login: ", True, "cloud-init ran but did not start the agent"),
        ("distro login: ", False, "no cloud-init seed was attached"),
    ],
)  # fmt: skip
@pytest.mark.asyncio
async def test_a_booted_guest_without_either_channel_fails_naming_both(
    tmp_path: Path, fast: None, console: str, seed: bool, says: str
) -> None:
    log = tmp_path / "console.log"
    log.write_text(console)
    with pytest.raises(AgentUnreachable) as caught:
        await await_delivery(
            _never, seed=seed, console_log=log, serial_path=tmp_path / "s", ping=_ping(1e9)
        )
    message = str(caught.value)
    assert message.startswith("no way to deliver the agent: qemu-ga did not answer")
    assert says in message and "needs qemu-guest-agent" in message


@pytest.mark.asyncio
async def test_no_verdict_before_the_guest_finished_booting(tmp_path: Path, fast: None) -> None:
    log = tmp_path / "console.log"
    log.write_text("[  3.0] systemd[1]: Starting ...\n")
    task = asyncio.ensure_future(
        await_delivery(_never, seed=True, console_log=log, serial_path=None, ping=_ping(1e9))
    )
    await asyncio.sleep(0.3)
    assert not task.done()
    log.write_text("[  3.0] systemd[1]: Starting ...\ndistro login: ")
    with pytest.raises(AgentUnreachable):
        await asyncio.wait_for(task, 5)


@pytest.mark.asyncio
async def test_no_ping_reaches_the_serial_port_while_the_firmware_runs(
    tmp_path: Path, fast: None
) -> None:
    log = tmp_path / "console.log"
    log.write_text('BdsDxe: starting Boot0001 "UEFI Misc Device"\n')  # firmware, menu
    pings: list[Path] = []

    async def ping(path: Path, timeout: float) -> dict[str, Any]:
        pings.append(path)
        return {"listening": True}

    waiting = asyncio.ensure_future(
        await_delivery(_never, seed=True, console_log=log, serial_path=tmp_path / "s", ping=ping)
    )
    await asyncio.sleep(0.2)
    assert pings == [] and not waiting.done()  # a boot menu would read pings as keys
    log.write_text("[    0.000000] Linux version 6.1.0-28-cloud-amd64\n")
    assert await asyncio.wait_for(waiting, 5) == "cloud-init"
    assert pings
