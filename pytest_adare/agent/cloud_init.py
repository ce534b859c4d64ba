"""The agent delivered by cloud-init: a NoCloud seed volume (ISO 9660, label ``cidata``).

An image that has cloud-init but no qemu-guest-agent (Debian's genericcloud, most
distributions' cloud images) reads a NoCloud seed at first boot. The seed's
``user-data`` writes the agent bundle and ``config.json`` (mode 0600: it holds the
token) into the layout :class:`~pytest_adare.agent.install.GuestLayout` names and starts
the agent as a systemd service (restarted on failure, logs in the journal). The ISO is
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
    return (
        "[Unit]\nDescription=adare guest agent (pytest-adare)\nAfter=network.target\n\n"
        "[Service]\n"
        f"WorkingDirectory={layout.run_dir}\n"
        f"ExecStart=/usr/bin/env {layout.python} {layout.bundle_path} {layout.run_dir}\n"
        "Restart=on-failure\nRestartSec=1\n"
    )


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
        ],
        # write_files runs after systemd planned the boot: start the unit explicitly,
        # without waiting for the boot to finish (cloud-final is part of it).
        "runcmd": [
            # The agent's port in the guest's firewalls, in memory only (as over QGA).
            [layout.python, firewall_path, str(config.get("port", DEFAULT_PORT))],
            ["systemctl", "daemon-reload"],
            ["systemctl", "start", "--no-block", SERVICE_NAME],
        ],
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
