"""The accelerator decision: explicit requests, unusable /dev/kvm, cached probe verdicts."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from pytest_adare.machine_tools import accel
from pytest_adare.machine_tools.accel import choose_accel, kvm_unusable_reason


def test_tcg_on_request_needs_no_probe() -> None:
    assert choose_accel("tcg") == accel.AccelChoice("tcg", None, "accel: tcg (requested)")


def test_an_unknown_accelerator_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, kvm or tcg"):
        choose_accel("hvf")  # type: ignore[arg-type]


def test_a_missing_kvm_device_says_why(tmp_path: Path) -> None:
    reason = kvm_unusable_reason(str(tmp_path / "kvm"))
    assert reason is not None and "No such file" in reason


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs QEMU's version")
def test_a_cached_verdict_is_used_without_booting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accel, "kvm_unusable_reason", lambda device="/dev/kvm": None)
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"not really a kernel")
    cache = tmp_path / "accel-probe.json"
    host = accel._host_key("qemu-system-x86_64")
    verdict = {"kvm": True, "cpu_model": "qemu64", "why": "probe boot progressed in 0.4 s"}
    cache.write_text(json.dumps({host: {hashlib.sha256(kernel.read_bytes()).hexdigest(): verdict}}))
    choice = choose_accel("auto", probe_kernel=kernel, cache_path=cache)
    assert choice == accel.AccelChoice(
        "kvm", "qemu64", "accel: kvm (probe boot progressed in 0.4 s, cached)"
    )
    # An explicit kvm request reuses the CPU model the probe saw working.
    assert choose_accel("kvm", cache_path=cache).cpu_model == "qemu64"


def test_a_rewritten_kernel_is_hashed_again(tmp_path: Path) -> None:
    from pytest_adare.machine_tools.accel import _kernel_key

    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"first kernel")
    first = _kernel_key(kernel)
    assert _kernel_key(kernel) == first == hashlib.sha256(b"first kernel").hexdigest()
    kernel.write_bytes(b"second kernel, longer")
    assert _kernel_key(kernel) == hashlib.sha256(b"second kernel, longer").hexdigest()
