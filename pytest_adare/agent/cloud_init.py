"""The agent delivered by cloud-init: a NoCloud seed volume (ISO 9660, label ``cidata``).

An image that has cloud-init but no qemu-guest-agent (Debian's genericcloud, most
distributions' cloud images) reads a NoCloud seed at first boot. The seed's
``user-data`` writes the agent bundle and ``config.json`` (mode 0600: it holds the
token) into the layout :class:`~pytest_adare.agent.install.GuestLayout` names and starts
the agent as a systemd service (restarted on failure, logs in the journal) from
cloud-init's first stage, not its last (see :func:`starter`). The ISO is
written by ``pycdlib`` (pure Python: no root, no mounts, no ``genisoimage``)::

    seed = write_seed(workdir / "seed.iso", layout, bundle, config, instance_id="vm-1")

QEMU attaches it as a read-only CD-ROM (``MachineConfig.seed``); cloud-init's
``ds-identify`` finds it by its label.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adare_guest.config import DEFAULT_PORT
from pytest_adare.agent.install import FIREWALL_SCRIPT, GuestLayout
from pytest_adare.image.agent_bundle import AgentBundle

SEED_LABEL = "cidata"
SERVICE_NAME = "adare-agent.service"
CLOUD_INIT_BANNER = r"Cloud-init v\. \S+ running"
"""What cloud-init prints on the console when one of its stages starts."""
CLOUD_INIT_DONE = r"Cloud-init v\. \S+ finished"
"""What cloud-init prints on the console when its last stage is done."""


def service_unit(layout: GuestLayout) -> str:
    """The systemd unit that runs the agent from the bundle."""
    # Started while cloud-init's first stage still runs (see ``starter``): without default
    # dependencies it need not wait for basic.target, which waits for that stage; the
    # network is configured by then (cloud-init.service runs after it).
    return (
        "[Unit]\nDescription=adare guest agent (pytest-adare)\nDefaultDependencies=no\n"
        "After=network.target\nConflicts=shutdown.target\nBefore=shutdown.target\n\n"
        "[Service]\n"
        f"WorkingDirectory={layout.run_dir}\n"
        f"ExecStart=/usr/bin/env {layout.python} {layout.bundle_path} {layout.run_dir}\n"
        "Restart=on-failure\nRestartSec=1\n"
    )


def seed_marker(layout: GuestLayout) -> str:
    """The file ``write_files`` writes last: all the others are complete once it exists."""
    return posixpath.join(layout.agent_dir, "seed-written")


def starter(layout: GuestLayout, port: int) -> list[str]:
    """The ``bootcmd`` entry that starts the agent as soon as the seed's files are written.

    cloud-init's ``runcmd`` runs in its last stage, minutes into a TCG boot (seen: the agent
    started 290 s in, past the 300 s boot timeout under load). ``bootcmd`` runs in the
    first stage, but before ``write_files``: so it starts a transient unit outside the
    boot's ordering that waits (at most 5 min) for the last written file, opens the
    agent's port in the guest's firewalls (in memory only, as over QGA) and starts the
    agent's service. It runs on every boot, so a rebooted guest gets its agent back.
    """
    firewall = posixpath.join(layout.agent_dir, "firewall.py")
    script = (
        f"i=0; while [ ! -e {shlex.quote(seed_marker(layout))} ]; do "
        'i=$((i+1)); [ "$i" -le 600 ] || exit 1; sleep 0.5; done; '
        f"{shlex.quote(layout.python)} {shlex.quote(firewall)} {port}; "
        f"systemctl daemon-reload && exec systemctl start --no-block {SERVICE_NAME}"
    )
    return [
        "systemd-run", "--no-block", "--unit=adare-agent-start",
        "--property=DefaultDependencies=no", "/bin/sh", "-c", script,
    ]  # fmt: skip


def user_data(layout: GuestLayout, bundle: bytes, config: Mapping[str, Any]) -> str:
    """The ``#cloud-config`` that installs and starts the agent (JSON is valid YAML)."""
    unit_path = posixpath.join("/etc/systemd/system", SERVICE_NAME)
    firewall_path = posixpath.join(layout.agent_dir, "firewall.py")
    document = {
        # Generating locales costs tens of seconds under TCG and the agent needs none.
        "locale": False,
        "write_files": [
            {
                "path": layout.bundle_path,
                "encoding": "b64",
                "content": base64.b64encode(bundle).decode("ascii"),
                "permissions": "0644",
            },
            {
                "path": layout.config_path,
                "content": json.dumps(dict(config), indent=1),
                "permissions": "0600",
            },
            {"path": unit_path, "content": service_unit(layout), "permissions": "0644"},
            {"path": firewall_path, "content": FIREWALL_SCRIPT, "permissions": "0644"},
            # Last: the starter waits for it (entries are written in order).
            {"path": seed_marker(layout), "content": "", "permissions": "0644"},
        ],
        # write_files runs after systemd planned the boot: the unit is started explicitly,
        # without waiting for the boot to finish.
        "bootcmd": [starter(layout, int(config.get("port", DEFAULT_PORT)))],
    }
    return "#cloud-config\n" + json.dumps(document) + "\n"


def meta_data(instance_id: str) -> str:
    """NoCloud ``meta-data``: a new instance id makes cloud-init run its first boot."""
    return json.dumps({"instance-id": instance_id, "local-hostname": "adare-guest"}) + "\n"


def write_seed(
    out: Path,
    layout: GuestLayout,
    bundle: AgentBundle,
    config: Mapping[str, Any],
    *,
    instance_id: str,
) -> Path:
    """Write the NoCloud seed ISO to ``out`` (Joliet + Rock Ridge names, label ``cidata``)."""
    # Deferred: only images delivered by cloud-init need the ISO writer.
    import pycdlib

    files = {
        "user-data": user_data(layout, bundle.path.read_bytes(), config).encode(),
        "meta-data": meta_data(instance_id).encode(),
    }
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=SEED_LABEL)
    for index, (name, data) in enumerate(files.items()):
        iso.add_fp(
            io.BytesIO(data), len(data), f"/FILE{index}.;1",
            rr_name=name, joliet_path=f"/{name}",
        )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    iso.write(str(tmp))
    iso.close()
    tmp.chmod(0o600)
    tmp.replace(out)
    return out
