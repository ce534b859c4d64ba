"""The KVM probe boots the image's kernel for real, once; later decisions come from the cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from image_under_test import image_under_test

from pytest_adare.machine_tools.accel import choose_accel

pytestmark = pytest.mark.e2e


def test_auto_probes_once_then_answers_from_the_cache(tmp_path: Path) -> None:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no usable /dev/kvm: auto is TCG without a probe")
    kernel = image_under_test().kernel
    assert kernel is not None, "the built-in image boots a kernel directly"
    cache = tmp_path / "accel-probe.json"
    first = choose_accel("auto", probe_kernel=kernel, cache_path=cache, probe_seconds=6)
    print(f"\n{first.reason}")
    assert first.reason.startswith(f"accel: {first.accel} (")
    assert "cached" not in first.reason
    (verdicts,) = json.loads(cache.read_text()).values()
    assert next(iter(verdicts.values()))["kvm"] is (first.accel == "kvm")
    again = choose_accel("auto", probe_kernel=kernel, cache_path=cache)
    assert (again.accel, again.cpu_model) == (first.accel, first.cpu_model)
    assert again.reason.endswith(", cached)")
