"""The pure parts of hypervisor evidence: the guest clock option and its QEMU argument,
the bundle manifest (hashes, verification) and the CASE/UCO export checked by
``case_validate`` (case-utils, offline: it ships the CASE ontology)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_adare.forensics.diff import FsDiff
from pytest_adare.forensics.entry import Entry
from pytest_adare.forensics.evidence_bundle import (
    CASE_FILE,
    MANIFEST_FILE,
    BundleFacts,
    verify_bundle,
    write_bundle,
)
from pytest_adare.machine.spec import MachineSpec
from pytest_adare.qemu.argv import MachineConfig, build_qemu_argv
from pytest_adare.vm_options import VMOptions, rtc_base

MARCH_1 = 1709283600.0  # 2024-03-01T09:00:00Z
FILE = Entry("file", 5, 0o100644, 0, 0, 12, MARCH_1, MARCH_1, MARCH_1, None, "ab" * 32, None)
DIFF = FsDiff(
    created={"/srv/new"},
    deleted={"/srv/gone"},
    modified={"/srv/changed": {"size": (1, 5)}},
    before_entries={"/srv/gone": FILE, "/srv/changed": FILE._replace(size=1)},
    after_entries={"/srv/new": FILE, "/srv/changed": FILE},
    metadata={"root": "/srv"},
)


def case_validate(path: Path) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "case_validate"
    return subprocess.run([str(binary), str(path)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("clock", "base"),
    [
        ("2024-03-01T09:00:00Z", "2024-03-01T09:00:00"),
        ("2024-03-01T10:00:00+01:00", "2024-03-01T09:00:00"),
        ("2024-03-01", "2024-03-01T00:00:00"),
        ("2024-03-01T09:00:00.750", "2024-03-01T09:00:00"),
    ],
)
def test_clock_becomes_a_utc_rtc_base_on_the_virtual_clock(clock: str, base: str) -> None:
    assert rtc_base(clock) == base
    options = VMOptions(clock=clock)
    spec = MachineSpec(rtc_base=options.rtc_base)
    config = MachineConfig(Path("/q"), Path("/a"), spec, kernel=Path("/k"))
    argv = build_qemu_argv(config)
    assert argv[argv.index("-rtc") + 1] == f"base={base},clock=vm"


def test_no_clock_leaves_the_rtc_to_qemu() -> None:
    assert "-rtc" not in build_qemu_argv(MachineConfig(Path("/q"), Path("/a"), kernel=Path("/k")))


@pytest.mark.parametrize("bad", ["yesterday", "2024-13-01", "1969-12-31T23:59:59Z", ""])
def test_a_bad_clock_is_refused_before_anything_starts(bad: str) -> None:
    with pytest.raises(ValueError, match="clock"):
        VMOptions(clock=bad)


def test_the_machine_spec_refuses_an_rtc_base_qemu_would_misread() -> None:
    with pytest.raises(ValueError, match="rtc_base"):
        MachineSpec(rtc_base="2024-03-01,clock=host")


def write_sample_bundle(dest: Path) -> dict[str, object]:
    dest.mkdir()
    (dest / "memory.elf").write_bytes(b"\x7fELF" + bytes(1000))
    (dest / "network.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))
    facts = BundleFacts(
        image_name="debian", image_disk_sha256="cd" * 32, qemu_version="7.2.22",
        qemu_argv=["qemu-system-x86_64", "-m", "256"], host_at_pause=MARCH_1 + 5,
        guest_time=MARCH_1, host_at_guest_read=MARCH_1 + 4, quiesced="guest sync",
        test_id="tests/test_x.py::test_y", vm={"memory_mib": 256, "lan_ports": ()},
        notes=["a note"],
    )  # fmt: skip
    return write_bundle(
        dest, [("memory", dest / "memory.elf"), ("pcap", dest / "network.pcap")], facts, DIFF
    )


def test_bundle_manifest_lists_each_file_with_its_host_sha256(tmp_path: Path) -> None:
    dest = tmp_path / "bundle"
    manifest = write_sample_bundle(dest)
    assert json.loads((dest / MANIFEST_FILE).read_text()) == manifest
    files = {item["name"]: item for item in manifest["files"]}  # type: ignore[attr-defined]
    assert set(files) == {"memory.elf", "network.pcap", "fs-diff.json", "fs-diff.jsonld"}
    for name, item in files.items():
        data = (dest / name).read_bytes()
        assert (item["size"], item["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert manifest["clocks"]["guest_utc"] == "2024-03-01T09:00:00Z"  # type: ignore[index]
    assert FsDiff.from_json(dest / "fs-diff.json") == DIFF
    assert verify_bundle(dest) == []


def test_verify_names_a_changed_and_a_missing_file(tmp_path: Path) -> None:
    dest = tmp_path / "bundle"
    write_sample_bundle(dest)
    (dest / "memory.elf").write_bytes(b"\x7fELF" + bytes(999) + b"x")
    (dest / "network.pcap").unlink()
    assert verify_bundle(dest) == ["memory.elf: sha256 differs", "network.pcap: missing"]


def test_a_file_outside_the_bundle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").write_bytes(b"x")
    (tmp_path / "b").mkdir()
    facts = BundleFacts("debian", None, "7.2", [], MARCH_1)
    with pytest.raises(ValueError, match="not inside the bundle"):
        write_bundle(tmp_path / "b", [("memory", tmp_path / "outside")], facts)


def test_diff_and_bundle_export_as_valid_case(tmp_path: Path) -> None:
    dest = tmp_path / "bundle"
    write_sample_bundle(dest)
    exported = DIFF.export(tmp_path / "diff.jsonld")
    graph = json.loads(exported.read_text())
    files = [n for n in graph["@graph"] if n["@type"] == "uco-observable:File"]
    assert sorted(f["uco-core:hasFacet"][0]["uco-observable:filePath"] for f in files) == [
        "/srv/changed", "/srv/gone", "/srv/new"
    ]  # fmt: skip
    for path in (exported, dest / CASE_FILE):
        done = case_validate(path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Conforms: True" in done.stdout


def test_case_validate_rejects_a_broken_graph(tmp_path: Path) -> None:
    exported = json.loads(DIFF.export(tmp_path / "diff.jsonld").read_text())
    facet = next(n for n in exported["@graph"] if n["@type"] == "uco-observable:File")
    facet["uco-core:hasFacet"][0]["uco-observable:sizeInBytes"] = {"@value": "many"}
    broken = tmp_path / "broken.jsonld"
    broken.write_text(json.dumps(exported))
    assert case_validate(broken).returncode != 0
