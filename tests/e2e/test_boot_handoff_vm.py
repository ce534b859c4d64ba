"""VM.start() hands a changed agent bundle to a built-in image in its initrd."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.image.agent_bundle import build_agent_bundle
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions

pytestmark = pytest.mark.e2e


def test_a_changed_bundle_reaches_the_guest_through_the_initrd(tmp_path: Path) -> None:
    image = image_under_test()
    if not (image.agent.baked and image.agent.initrd_handoff and image.initrd):
        pytest.skip(f"{image.name} takes no initrd hand-off")
    # As if the baked agent were older than ours: the bundle must go along.
    stale = replace(image, agent=replace(image.agent, bundle_hash="an-older-bundle"))
    bundle = build_agent_bundle(gui=image.desktop)
    # Cold: a warm start would load a saved guest instead of booting this hand-off.
    with VM(stale, tmp_path, VMOptions(warm="off"), name="handoff") as vm:
        boot = next(p for p in vm.phases if p.name == "boot")
        assert "config + newer bundle via initrd" in boot.detail
        assert vm.guest.server_info["bundle_hash"] == bundle.bundle_hash
        baked = vm.guest.shell("sha256sum /adare/agent/bundle.pyz").stdout.split()[0]
        assert baked == hashlib.sha256(bundle.path.read_bytes()).hexdigest()
        assert "-fw_cfg" not in vm.machine.argv
