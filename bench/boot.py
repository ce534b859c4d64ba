"""Boot benchmark of the built-in console image (issue 4), printed as JSON.

    python bench/boot.py [--image debian] [--runs 3] [--build]

Reports the image's size, its build time (measured with ``--build``, else the
phases recorded in the image's build.log), and the median over ``--runs`` boots
of QEMU start -> first console line, init ready, QGA answering, agent answering;
under TCG and, beside it, KVM where KVM is usable on this host; and, for a host
agent newer than the baked one, its bundle handed over via the initrd beside
via fw_cfg.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_adare.image.build import build_image
from pytest_adare.image.manifest import ImageManifest, write_manifest
from pytest_adare.image.recipe import debian_recipe
from pytest_adare.image.resolve import resolve_image
from pytest_adare.image_check import check_image

PHASES = ("console", "init", "qga", "agent")


def _quiet(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _sizes(manifest: ImageManifest) -> dict[str, int]:
    files = {"disk": manifest.disk, "kernel": manifest.kernel, "initrd": manifest.initrd}
    return {f"{name}_bytes": path.stat().st_size for name, path in files.items() if path}


def _recorded_build(manifest: ImageManifest) -> dict[str, Any]:
    log = manifest.disk.parent / "build.log"
    for line in reversed(log.read_text().splitlines() if log.exists() else []):
        if line.startswith("phases: "):
            phases = ast.literal_eval(line.removeprefix("phases: "))
            return {
                "seconds": round(sum(phases.values()), 1),
                "phases": phases,
                "source": "build.log of the image",
            }
    return {"seconds": None, "source": "no build.log"}


def _changed_agent(manifest: ImageManifest, runs: int) -> dict[str, Any]:
    """A host agent newer than the baked one: its bundle via the initrd vs via fw_cfg."""
    if not manifest.agent.initrd_handoff:
        return {"skipped": "the image takes no initrd hand-off"}
    stale = replace(manifest, agent=replace(manifest.agent, bundle_hash="stale"))
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="adare-bench-stale-") as tmp:
        spec = str(write_manifest(stale, Path(tmp)))
        for route in ("initrd", "fw_cfg"):
            samples = []
            for _ in range(runs):
                report = check_image(spec, accel="tcg", timeout=180, progress=_quiet, handoff=route)
                if not report.ok:
                    return {"ok": False, "route": route, "failure": report.failure}
                samples.append(report.phases)
            result[f"bundle_via_{route}"] = {
                phase: round(statistics.median(s[phase] for s in samples), 2)
                for phase in ("init", "agent")
            }
    return result


def _boots(spec: str, accel: str, runs: int) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    reasons: set[str] = set()
    for _ in range(runs):
        report = check_image(spec, accel=accel, timeout=180, progress=_quiet)  # type: ignore[arg-type]
        reasons.add(str(report.accel_reason))
        if not report.ok:
            return {"ok": False, "failure": report.failure, "accel_reason": sorted(reasons)}
        if report.accel != accel:
            return {"usable": False, "accel_reason": sorted(reasons)}
        samples.append(report.phases)
    return {
        "usable": True,
        "runs": runs,
        "accel_reason": sorted(reasons),
        "median_seconds_from_qemu_start": {
            phase: round(statistics.median(s[phase] for s in samples), 2)
            for phase in PHASES
            if all(phase in s for s in samples)
        },
        "all_runs": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="debian", help="image spec (default: debian)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--build", action="store_true", help="time a fresh console build")
    args = parser.parse_args()
    result: dict[str, Any] = {"benchmark": "boot", "image": args.image}
    if args.build:
        with tempfile.TemporaryDirectory(prefix="adare-bench-build-") as tmp:
            began = time.monotonic()
            build_image(debian_recipe(), Path(tmp) / "debian", progress=_quiet)
            result["build"] = {
                "seconds": round(time.monotonic() - began, 1),
                "source": "measured in this run",
            }
    manifest = resolve_image(args.image, progress=_quiet)
    result.setdefault("build", _recorded_build(manifest))
    result["size"] = _sizes(manifest)
    spec = str(manifest.path or manifest.disk)
    result["tcg"] = _boots(spec, "tcg", args.runs)
    result["kvm"] = _boots(spec, "kvm", args.runs)
    result["tcg_changed_agent_median_seconds"] = _changed_agent(manifest, args.runs)
    print(json.dumps(result, indent=2))
    return 0 if result["tcg"].get("usable") else 1


if __name__ == "__main__":
    sys.exit(main())
