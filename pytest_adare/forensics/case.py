"""CASE/UCO JSON-LD (https://caseontology.org) for file-system diffs and evidence bundles.

A diff becomes one ``case-investigation:InvestigativeAction`` (the comparison of two
snapshots, with ``pytest-adare`` as its ``uco-action:instrument``) whose results are the
changed files, and one ``uco-action:Action`` per change (``created``, ``deleted``,
``modified``) naming the file as result (created, modified) or object (deleted). Each
file is a ``uco-observable:File`` with a ``FileFacet`` (path, size, MAC times) and,
when hashed, a ``ContentDataFacet`` with its SHA256. An evidence bundle becomes an
``InvestigativeAction`` (the collection) whose results are the bundle's files with
size and SHA256. Node ids are ``kb:`` IRIs made from stable UUIDs (uuid5 of the
content), so the same input gives the same graph. Validated with ``case_validate``
from ``case-utils`` in the tests.
"""

from __future__ import annotations

import importlib.metadata
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from pytest_adare.forensics.entry import Entry

CONTEXT: dict[str, str] = {
    "kb": "http://example.org/kb/",
    "case-investigation": "https://ontology.caseontology.org/case/investigation/",
    "uco-action": "https://ontology.unifiedcyberontology.org/uco/action/",
    "uco-core": "https://ontology.unifiedcyberontology.org/uco/core/",
    "uco-observable": "https://ontology.unifiedcyberontology.org/uco/observable/",
    "uco-tool": "https://ontology.unifiedcyberontology.org/uco/tool/",
    "uco-types": "https://ontology.unifiedcyberontology.org/uco/types/",
    "uco-vocabulary": "https://ontology.unifiedcyberontology.org/uco/vocabulary/",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
}
_NAMESPACE = uuid.UUID("6f1c1b7e-3c39-4c59-9a43-5a6e0d6c2f10")
TOOL_NAME = "pytest-adare"


class CaseDiff(Protocol):
    """What the CASE writer reads of a diff (``FsDiff`` fits)."""

    @property
    def created(self) -> frozenset[str]: ...
    @property
    def deleted(self) -> frozenset[str]: ...
    @property
    def modified(self) -> Mapping[str, Mapping[str, tuple[Any, Any]]]: ...

    metadata: dict[str, Any]

    def entry(self, path: str) -> Entry | None: ...


def node_id(kind: str, *parts: object) -> str:
    """A stable ``kb:`` IRI for a node of ``kind`` identified by ``parts``."""
    key = "\x1f".join(str(p) for p in (kind, *parts))
    return f"kb:{kind}-{uuid.uuid5(_NAMESPACE, key)}"


def typed(value: object, xsd_type: str) -> dict[str, str]:
    """A JSON-LD typed literal, e.g. ``{"@type": "xsd:integer", "@value": "3"}``."""
    return {"@type": f"xsd:{xsd_type}", "@value": str(value)}


def timestamp(epoch: float) -> dict[str, str]:
    """An ``xsd:dateTime`` literal in UTC for epoch seconds."""
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return typed(moment.isoformat().replace("+00:00", "Z"), "dateTime")


def tool_node(version: str) -> dict[str, Any]:
    """The ``uco-tool:Tool`` that observed everything in the graph."""
    return {
        "@id": node_id("tool", TOOL_NAME, version),
        "@type": "uco-tool:Tool",
        "uco-core:name": TOOL_NAME,
        "uco-tool:version": version,
    }


def sha256_facet(owner: str, sha256: str, size: int | None) -> dict[str, Any]:
    """A ``ContentDataFacet`` holding a SHA256 (and the size when known)."""
    facet: dict[str, Any] = {
        "@id": node_id("content-facet", owner),
        "@type": "uco-observable:ContentDataFacet",
        "uco-observable:hash": [
            {
                "@id": node_id("hash", owner, sha256),
                "@type": "uco-types:Hash",
                "uco-types:hashMethod": "SHA256",
                "uco-types:hashValue": typed(sha256.upper(), "hexBinary"),
            }
        ],
    }
    if size is not None:
        facet["uco-observable:sizeInBytes"] = typed(size, "integer")
    return facet


def file_node(owner: str, path: str, entry: Entry | None) -> dict[str, Any]:
    """A ``uco-observable:File`` for ``path`` as ``entry`` describes it."""
    facet: dict[str, Any] = {
        "@id": node_id("file-facet", owner),
        "@type": "uco-observable:FileFacet",
        "uco-observable:filePath": path,
        "uco-observable:fileName": path.replace("\\", "/").rsplit("/", 1)[-1] or path,
    }
    facets: list[dict[str, Any]] = [facet]
    if entry is not None:
        facet["uco-observable:isDirectory"] = typed(str(entry.kind == "dir").lower(), "boolean")
        if entry.kind == "file":
            facet["uco-observable:sizeInBytes"] = typed(entry.size, "integer")
        times = (
            ("modifiedTime", entry.mtime),
            ("accessedTime", entry.atime),
            ("metadataChangeTime", entry.ctime),
            ("observableCreatedTime", entry.crtime),
        )
        for name, value in times:
            if value is not None:
                facet[f"uco-observable:{name}"] = timestamp(float(value))
        if entry.sha256:
            facets.append(sha256_facet(owner, entry.sha256, None))
    return {"@id": owner, "@type": "uco-observable:File", "uco-core:hasFacet": facets}


def _action(
    name: str,
    key: str,
    tool: str,
    *,
    results: Sequence[str] = (),
    objects: Sequence[str] = (),
    kind: str = "uco-action:Action",
) -> dict[str, Any]:
    action: dict[str, Any] = {
        "@id": node_id("action", name, key),
        "@type": kind,
        "uco-core:name": name,
        "uco-action:instrument": {"@id": tool},
    }
    if results:
        action["uco-action:result"] = [{"@id": r} for r in results]
    if objects:
        action["uco-action:object"] = [{"@id": o} for o in objects]
    return action


def _diff_nodes(diff: CaseDiff, tool: str, key: str) -> Iterator[dict[str, Any]]:
    changed: list[str] = []
    for change, paths in (("created", diff.created), ("deleted", diff.deleted),
                          ("modified", frozenset(diff.modified))):  # fmt: skip
        for path in sorted(paths):
            owner = node_id("file", key, change, path)
            changed.append(owner)
            yield file_node(owner, path, diff.entry(path))
            deleted = change == "deleted"
            yield _action(
                f"file {change}", f"{key}:{path}", tool,
                objects=[owner] if deleted else [], results=[] if deleted else [owner],
            )  # fmt: skip
    yield _action(
        "file system snapshot comparison", key, tool, results=changed,
        kind="case-investigation:InvestigativeAction",
    )  # fmt: skip


def diff_graph(diff: CaseDiff, *, tool_version: str) -> dict[str, Any]:
    """The CASE JSON-LD document of ``diff`` (see the module docstring)."""
    tool = tool_node(tool_version)
    key = json.dumps(diff.metadata, sort_keys=True, default=str)
    return {"@context": CONTEXT, "@graph": [tool, *_diff_nodes(diff, tool["@id"], key)]}


def bundle_graph(manifest: Mapping[str, Any], *, tool_version: str) -> dict[str, Any]:
    """The CASE JSON-LD document of an evidence bundle's ``manifest.json`` content."""
    tool = tool_node(tool_version)
    key = str(manifest.get("created_at", ""))
    nodes: list[dict[str, Any]] = [tool]
    results: list[str] = []
    for item in manifest.get("files", []):
        owner = node_id("evidence-file", key, item["name"])
        results.append(owner)
        node = file_node(owner, str(item["name"]), None)
        node["uco-core:hasFacet"].append(sha256_facet(owner, item["sha256"], int(item["size"])))
        node["uco-core:description"] = f"{item['kind']} evidence"
        nodes.append(node)
    collection = _action(
        "hypervisor evidence collection", key, tool["@id"], results=results,
        kind="case-investigation:InvestigativeAction",
    )  # fmt: skip
    clocks = manifest.get("clocks", {})
    if clocks.get("host_at_pause") is not None:
        collection["uco-action:startTime"] = timestamp(float(clocks["host_at_pause"]))
    if manifest.get("test_id"):
        collection["uco-core:description"] = f"pytest test {manifest['test_id']}"
    nodes.append(collection)
    return {"@context": CONTEXT, "@graph": nodes}


def write_graph(graph: Mapping[str, Any], path: Path) -> Path:
    """Write a JSON-LD document (ASCII, indented) to ``path``."""
    path.write_text(json.dumps(graph, indent=1, ensure_ascii=True) + "\n", encoding="ascii")
    return path


def tool_version() -> str:
    """The installed pytest-adare version (``unknown`` when run from a bare checkout)."""
    try:
        return importlib.metadata.version("pytest-adare")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
