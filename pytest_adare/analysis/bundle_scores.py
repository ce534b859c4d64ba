"""A tool validation's scores as part of an evidence bundle: the tool's assertions.

``add_scores(bundle, validations)`` writes ``tool-scores.json`` (each run's score) and
``tool-scores.jsonld`` into a ``vm.collect_evidence`` directory, lists both in its
``manifest.json`` (size, sha256) and writes the manifest's CASE graph again. In CASE
each version is a ``uco-tool:Tool``, its run a ``case-investigation:InvestigativeAction``
over the bundle's disk, and each verdict a ``uco-core:Assertion`` among its results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_adare.analysis.validation import Validation
from pytest_adare.file_hash import file_sha256
from pytest_adare.forensics import case
from pytest_adare.forensics.evidence_bundle import CASE_FILE, MANIFEST_FILE

SCORES_FILE = "tool-scores.json"
SCORES_CASE_FILE = "tool-scores.jsonld"


def add_scores(bundle: Path, validations: Sequence[Validation]) -> dict[str, Any]:
    """Add the scores to the bundle at ``bundle``; returns the manifest as written.

    :raise FileNotFoundError: ``bundle`` holds no ``manifest.json``.
    """
    manifest: dict[str, Any] = json.loads((bundle / MANIFEST_FILE).read_text(encoding="utf-8"))
    scores = [{**v.score.to_json(), "versions": dict(v.run.versions)} for v in validations]
    (bundle / SCORES_FILE).write_text(json.dumps({"scores": scores}, indent=1) + "\n")
    case.write_graph(scores_graph(manifest, validations), bundle / SCORES_CASE_FILE)
    listed = [f for f in manifest["files"] if f["name"] not in (SCORES_FILE, SCORES_CASE_FILE)]
    for kind, name in (("tool-scores", SCORES_FILE), ("tool-scores-case", SCORES_CASE_FILE)):
        path = bundle / name
        listed.append({"name": name, "kind": kind, "size": path.stat().st_size,
                       "sha256": file_sha256(path)})  # fmt: skip
    manifest["files"] = listed
    (bundle / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    graph = case.bundle_graph(manifest, tool_version=case.tool_version())
    case.write_graph(graph, bundle / CASE_FILE)
    return manifest


def scores_graph(manifest: dict[str, Any], validations: Sequence[Validation]) -> dict[str, Any]:
    """The CASE JSON-LD of the scores: per version a tool, its action, its assertions."""
    key = str(manifest.get("created_at", ""))
    disks = [
        case.node_id("evidence-file", key, f["name"])
        for f in manifest.get("files", []) if f.get("kind") == "disk"
    ]  # fmt: skip
    # The disk's node is described in manifest.jsonld; named here by type too, so this
    # graph is valid on its own.
    nodes: list[dict[str, Any]] = [{"@id": d, "@type": "uco-observable:File"} for d in disks]
    for validation in validations:
        label = validation.run.tool
        tool = {
            "@id": case.node_id("tool", label),
            "@type": "uco-tool:Tool",
            "uco-core:name": label,
            "uco-tool:version": ", ".join(
                f"{name} {version}" for name, version in validation.run.versions.items()
            ) or label,
        }  # fmt: skip
        assertions = []
        for index, outcome in enumerate(validation.score.outcomes):
            assertions.append({
                "@id": case.node_id("assertion", key, label, index),
                "@type": "uco-core:Assertion",
                "uco-core:statement": f"{outcome.verdict}: {outcome.expectation.describe()} "
                f"({outcome.tool_value()})",
            })  # fmt: skip
        action: dict[str, Any] = {
            "@id": case.node_id("action", "tool validation", key, label),
            "@type": "case-investigation:InvestigativeAction",
            "uco-core:name": "tool validation",
            "uco-core:description": json.dumps(validation.score.counts(), sort_keys=True),
            "uco-action:instrument": {"@id": tool["@id"]},
            "uco-action:result": [{"@id": a["@id"]} for a in assertions],
        }
        if disks:
            action["uco-action:object"] = [{"@id": d} for d in disks]
        nodes += [tool, action, *assertions]
    return {"@context": case.CONTEXT, "@graph": nodes}
