"""The manifest of an evidence bundle: what was taken, its hashes, and the circumstances.

The machine side (:mod:`pytest_adare.forensics.evidence_capture`) writes the files; this
module gets them as plain data and writes ``dest/manifest.json`` (and the same as
CASE/UCO JSON-LD in ``dest/manifest.jsonld``)::

    {"format": "adare-evidence-bundle", "version": 1, "created_at": "...Z",
     "test_id": "tests/test_x.py::test_y" | null,
     "image": {"name": "debian", "disk_sha256": "..."},
     "qemu": {"version": "7.2.22 (...)", "argv": [...]},
     "vm": {...the VMOptions...},
     "clocks": {"host_at_pause": 1764..., "guest": 1709..., "host_at_guest_read": 1764...},
     "quiesced": "qemu-ga fsfreeze (1 file system(s))",
     "files": [{"name": "memory.elf", "kind": "memory", "size": 285343744, "sha256": "..."}],
     "notes": ["..."]}

``files`` names are relative to the bundle directory. :func:`verify_bundle` recomputes
every hash and size and lists what does not match.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_adare.file_hash import file_sha256
from pytest_adare.forensics import case
from pytest_adare.forensics.export import DiffLike, write_case, write_json

MANIFEST_FILE = "manifest.json"
CASE_FILE = "manifest.jsonld"
DIFF_FILE = "fs-diff.json"
DIFF_CASE_FILE = "fs-diff.jsonld"
FORMAT = "adare-evidence-bundle"
VERSION = 1


@dataclass(frozen=True)
class BundleFacts:
    """The circumstances of one collection (all plain data)."""

    image_name: str
    image_disk_sha256: str | None
    qemu_version: str
    qemu_argv: Sequence[str]
    host_at_pause: float
    guest_time: float | None = None
    host_at_guest_read: float | None = None
    quiesced: str = ""
    test_id: str | None = None
    vm: Mapping[str, Any] = field(default_factory=dict)
    notes: Sequence[str] = ()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def write_bundle(
    dest: Path,
    files: Sequence[tuple[str, Path]],
    facts: BundleFacts,
    fs_diff: DiffLike | None = None,
) -> dict[str, Any]:
    """Write ``manifest.json`` and ``manifest.jsonld`` for ``files`` (kind, path in dest).

    With ``fs_diff`` the diff is exported too (``fs-diff.json`` and ``fs-diff.jsonld``)
    and listed. Returns the manifest.

    :raise ValueError: a file lies outside ``dest``.
    """
    dest = dest.resolve()
    listed = list(files)
    if fs_diff is not None:
        write_json(fs_diff, dest / DIFF_FILE)
        write_case(fs_diff, dest / DIFF_CASE_FILE)
        listed += [("fs-diff", dest / DIFF_FILE), ("fs-diff-case", dest / DIFF_CASE_FILE)]
    entries = []
    for kind, path in listed:
        resolved = path.resolve()
        if dest not in resolved.parents:
            raise ValueError(f"{path} is not inside the bundle directory {dest}")
        entries.append({
            "name": resolved.relative_to(dest).as_posix(), "kind": kind,
            "size": resolved.stat().st_size, "sha256": file_sha256(resolved),
        })  # fmt: skip
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created_at": _iso(facts.host_at_pause),
        "test_id": facts.test_id,
        "image": {"name": facts.image_name, "disk_sha256": facts.image_disk_sha256},
        "qemu": {"version": facts.qemu_version, "argv": list(facts.qemu_argv)},
        "vm": dict(facts.vm),
        "clocks": {
            "host_at_pause": facts.host_at_pause,
            "host_at_pause_utc": _iso(facts.host_at_pause),
            "guest": facts.guest_time,
            "guest_utc": None if facts.guest_time is None else _iso(facts.guest_time),
            "host_at_guest_read": facts.host_at_guest_read,
        },
        "quiesced": facts.quiesced,
        "files": entries,
        "notes": list(facts.notes),
    }
    text = json.dumps(manifest, indent=1)
    (dest / MANIFEST_FILE).write_text(text + "\n", encoding="utf-8")
    # The manifest as the file holds it: what a reader of the bundle sees (tuples in the
    # VM's options are lists there), so the returned one always equals the file's.
    written: dict[str, Any] = json.loads(text)
    graph = case.bundle_graph(written, tool_version=case.tool_version())
    case.write_graph(graph, dest / CASE_FILE)
    return written


def verify_bundle(dest: Path) -> list[str]:
    """Recompute every listed file's size and sha256; one line per mismatch (none: ``[]``)."""
    manifest = json.loads((dest / MANIFEST_FILE).read_text(encoding="utf-8"))
    problems: list[str] = []
    for item in manifest["files"]:
        path = dest / item["name"]
        if not path.is_file():
            problems.append(f"{item['name']}: missing")
        elif path.stat().st_size != item["size"]:
            problems.append(f"{item['name']}: size {path.stat().st_size} != {item['size']}")
        elif file_sha256(path) != item["sha256"]:
            problems.append(f"{item['name']}: sha256 differs")
    return problems
