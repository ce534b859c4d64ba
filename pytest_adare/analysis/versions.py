"""What changed between tool versions over the same evidence, as the adare paper's
VERSION_CHANGES files say it: per expectation a verdict per version, and between
consecutive versions the records added and removed and the fields that appeared or went.

Pure: validations in, JSON-able dicts and Markdown out (``adare-tools.json`` / ``.md``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_adare.analysis.records import PlainRecord, ToolRecords
from pytest_adare.analysis.validation import Validation

MAX_LISTED = 20
"""Records listed per kind and change in the Markdown (the JSON holds the counts)."""


def _canonical(record: PlainRecord) -> str:
    return json.dumps(record, sort_keys=True)


def record_changes(old: ToolRecords, new: ToolRecords) -> dict[str, dict[str, Any]]:
    """Per kind: the records only ``new`` has (``added``), only ``old`` has (``removed``),
    and the field names that appeared or went."""
    changes: dict[str, dict[str, Any]] = {}
    for kind in sorted(set(old) | set(new)):
        before = {_canonical(r): r for r in old.get(kind, [])}
        after = {_canonical(r): r for r in new.get(kind, [])}
        fields_before = {name for r in before.values() for name in r}
        fields_after = {name for r in after.values() for name in r}
        change = {
            "added": [after[k] for k in sorted(set(after) - set(before))],
            "removed": [before[k] for k in sorted(set(before) - set(after))],
            "fields_added": sorted(fields_after - fields_before),
            "fields_removed": sorted(fields_before - fields_after),
        }
        if any(change.values()):
            changes[kind] = change
    return changes


def validation_report(validations: Sequence[Validation]) -> dict[str, Any]:
    """One test's runs: the verdict table and the changes between consecutive versions.

    A row per expectation any run judged, in the order first judged; a run that did not
    judge it (a tool scored on other kinds) has no cell there. Versions are compared
    within one ``validate`` call (one step over one evidence)."""
    rows: dict[int, dict[str, Any]] = {}
    for validation in validations:
        for outcome in validation.score.outcomes:
            row = rows.setdefault(
                id(outcome.expectation),
                {"expectation": outcome.expectation.describe(), "tools": {}},
            )
            row["tools"][validation.run.tool] = {
                "verdict": outcome.verdict, "value": outcome.tool_value(),
            }  # fmt: skip
    steps = []
    for old, new in itertools.pairwise(validations):
        if old.group != new.group:
            continue
        if old.run.records is not None and new.run.records is not None:
            changes = record_changes(old.run.records, new.run.records)
        else:
            changes = {}
        steps.append({"from": old.run.tool, "to": new.run.tool, "changes": changes})
    runs = [
        {
            "tool": v.run.tool, "versions": dict(v.run.versions), "failure": v.run.failure,
            "seconds": round(v.run.seconds, 2), "peak_rss_mib": v.run.peak_rss_mib,
            "counts": v.score.counts(),
        }
        for v in validations
    ]  # fmt: skip
    return {"runs": runs, "expectations": list(rows.values()), "version_changes": steps}


def verdict_table(report: Mapping[str, Any]) -> str:
    """The Markdown table of one test: expectation by version, verdict and tool's value."""
    tools = list(dict.fromkeys(run["tool"] for run in report["runs"]))
    lines = [
        "| expectation | " + " | ".join(f"`{t}`" for t in tools) + " |",
        "|---|" + "---|" * len(tools),
    ]
    for row in report["expectations"]:
        cells = [
            f"{c['verdict']}: {c['value']}" if c else "not judged"
            for c in (row["tools"].get(t) for t in tools)
        ]
        lines.append(f"| {row['expectation']} | " + " | ".join(_cell(c) for c in cells) + " |")
    for run in report["runs"]:
        if run["failure"]:
            lines.append(f"\n`{run['tool']}` failed: {_cell(run['failure'])}")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def changes_markdown(report: Mapping[str, Any]) -> str:
    """What changed from each version to the next, per kind."""
    lines = []
    for step in report["version_changes"]:
        lines.append(f"- `{step['from']}` → `{step['to']}`:" + ("" if step["changes"] else " none"))
        for kind, change in step["changes"].items():
            parts = [f"{len(change[k])} {k.replace('_', ' ')}" for k in ("added", "removed")]
            for key in ("fields_added", "fields_removed"):
                if change[key]:
                    parts.append(f"{key.replace('_', ' ')}: {', '.join(change[key])}")
            lines.append(f"  - {kind}: " + "; ".join(parts))
            for key in ("added", "removed"):
                for record in change[key][:MAX_LISTED]:
                    lines.append(f"    - {key[:-1]}: `{_cell(_canonical(record))}`")
    return "\n".join(lines)


def baseline_changes(report: Mapping[str, Any], old: Mapping[str, Any]) -> list[str]:
    """Verdicts that differ from an earlier run's ``adare-tools.json``, per test,
    expectation and tool (a test, expectation or tool only one run has is named too)."""
    changed = []
    for test, now in report["tests"].items():
        before = old.get("tests", {}).get(test)
        if before is None:
            changed.append(f"{test}: new since the baseline")
            continue
        earlier = {row["expectation"]: row["tools"] for row in before["expectations"]}
        for row in now["expectations"]:
            for tool, cell in row["tools"].items():
                was = earlier.get(row["expectation"], {}).get(tool)
                if was is None:
                    changed.append(f"{test}: {row['expectation']} [{tool}]: new, {cell['verdict']}")
                elif was["verdict"] != cell["verdict"]:
                    changed.append(
                        f"{test}: {row['expectation']} [{tool}]: {was['verdict']} -> "
                        f"{cell['verdict']}"
                    )
    return changed


def tools_markdown(report: Mapping[str, Any], baseline: Sequence[str] | None = None) -> str:
    """``adare-tools.md``: each test's table and version changes, then the baseline's."""
    parts = ["# Tool validation\n"]
    for test, one in report["tests"].items():
        parts += [f"## {test}\n", verdict_table(one), "", "### Version changes\n"]
        parts += [changes_markdown(one) or "- one version only", ""]
    if baseline is not None:
        parts += ["## Since the baseline\n", "\n".join(f"- {c}" for c in baseline) or "- none"]
    return "\n".join(parts) + "\n"
