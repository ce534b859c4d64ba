"""What changed between two filesystem snapshots (DESIGN §5).

``after.diff(before)`` gives an :class:`FsDiff`:

- ``created`` / ``deleted``: sets of paths (they compare equal to plain sets);
- ``modified``: path → ``{field: (before, after)}`` for the fields in
  :data:`COMPARED_FIELDS` (``sha256`` only when both snapshots hashed the file;
  the access time never counts: reading a file is not a change);
- ``timestamps_only``: the modified paths whose only changes are ``mtime``
  and/or ``ctime``; ``substantive`` is the rest. A size change always counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_adare.forensics import export
from pytest_adare.forensics.entry import Entry

__all__ = ["COMPARED_FIELDS", "TIMESTAMP_FIELDS", "FsDiff", "Modifications", "PathSet"]

COMPARED_FIELDS = ("type", "size", "mode", "uid", "gid", "target", "sha256", "mtime", "ctime")
TIMESTAMP_FIELDS = frozenset({"mtime", "ctime"})
_ENTRY_ATTRIBUTE = {"type": "kind"}
EXPORT_FORMATS = ("json", "csv", "bodyfile", "case")
_SUFFIX_FORMATS = {"jsonld": "case"}

FieldChanges = dict[str, tuple[Any, Any]]


class PathSet(frozenset[str]):
    """A set of paths that remembers which diff and which role (created/deleted) it is.

    It compares equal to any set with the same paths; the extra knowledge lets
    a failed ``assert diff.deleted == {...}`` explain itself.
    """

    __slots__ = ("diff", "role")
    role: str
    diff: FsDiff | None

    def __new__(
        cls, paths: Iterable[str] = (), role: str = "", diff: FsDiff | None = None
    ) -> PathSet:
        made = super().__new__(cls, paths)
        made.role = role
        made.diff = diff
        return made

    def __repr__(self) -> str:
        return repr(set(self)) if self else "set()"


class Modifications(dict[str, FieldChanges]):
    """path → {field: (before, after)}; knows its diff for assertion messages."""

    diff: FsDiff | None = None


@dataclass(eq=True)
class FsDiff:
    """The changes from a ``before`` snapshot to an ``after`` snapshot.

    Only ``created``, ``deleted`` and ``modified`` take part in ``==``; entries
    and metadata ride along for exports and messages. ``bool(diff)`` is True
    when anything changed.
    """

    created: PathSet = field(default_factory=PathSet)
    deleted: PathSet = field(default_factory=PathSet)
    modified: Modifications = field(default_factory=Modifications)
    before_entries: dict[str, Entry] = field(default_factory=dict, compare=False, repr=False)
    after_entries: dict[str, Entry] = field(default_factory=dict, compare=False, repr=False)
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.created = PathSet(self.created, "created", self)
        self.deleted = PathSet(self.deleted, "deleted", self)
        modified = Modifications(
            (path, {name: (pair[0], pair[1]) for name, pair in fields.items()})
            for path, fields in self.modified.items()
        )
        modified.diff = self
        self.modified = modified

    @classmethod
    def empty(cls) -> FsDiff:
        """A diff with no changes: ``assert diff == FsDiff.empty()``."""
        return cls()

    def __bool__(self) -> bool:
        return bool(self.created or self.deleted or self.modified)

    @property
    def timestamps_only(self) -> PathSet:
        """Modified paths whose only changes are timestamps (mtime/ctime)."""
        return PathSet(
            (p for p, fields in self.modified.items() if fields.keys() <= TIMESTAMP_FIELDS),
            "timestamps_only",
            self,
        )

    @property
    def substantive(self) -> Modifications:
        """The modifications that are more than timestamps (size, mode, owner, content, ...)."""
        kept = Modifications(
            (path, fields)
            for path, fields in self.modified.items()
            if not fields.keys() <= TIMESTAMP_FIELDS
        )
        kept.diff = self
        return kept

    @property
    def changed_paths(self) -> frozenset[str]:
        """Every path that was created, deleted or modified."""
        return frozenset(self.created).union(self.deleted, self.modified)

    def entry(self, path: str) -> Entry | None:
        """The newest known entry of ``path`` (after, else before), if the diff holds it."""
        return self.after_entries.get(path) or self.before_entries.get(path)

    def summary(self, limit: int = 20) -> str:
        """A readable report: counts, then up to ``limit`` lines per kind of change."""
        lines = [self.headline()]
        lines += describe_changes(self, self.created, self.deleted, self.modified, limit)
        return "\n".join(lines)

    def headline(self) -> str:
        """One line of counts, e.g. ``2 created, 0 deleted, 3 modified (1 timestamps only)``."""
        root = self.metadata.get("root")
        where = f" under {root}" if root else ""
        return (
            f"FsDiff{where}: {len(self.created)} created, {len(self.deleted)} deleted, "
            f"{len(self.modified)} modified ({len(self.timestamps_only)} timestamps only)"
        )

    def __str__(self) -> str:
        return self.summary()

    def export(self, path: str | Path, fmt: str | None = None) -> Path:
        """Write the diff as ``json``, ``csv``, ``bodyfile`` (mactime 3.x, 11 fields) or
        ``case`` (CASE/UCO JSON-LD).

        ``fmt`` defaults to the file suffix (``.jsonld`` is ``case``). Missing parent
        directories are created. Returns the path.

        :raise ValueError: unknown format.
        """
        target = Path(path)
        suffix = target.suffix.lstrip(".")
        chosen = fmt or _SUFFIX_FORMATS.get(suffix, suffix)
        if chosen not in EXPORT_FORMATS:
            raise ValueError(f"export format must be one of {EXPORT_FORMATS}, got {chosen!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        export.WRITERS[chosen](self, target)
        return target

    @classmethod
    def from_json(cls, path: str | Path) -> FsDiff:
        """Read back a diff written by ``export(path, "json")``."""
        return cls(**export.read_json(Path(path))._asdict())


def changed_fields(was: Entry, now: Entry) -> FieldChanges:
    """The compared fields that differ between two entries of the same path."""
    changes: FieldChanges = {}
    for name in COMPARED_FIELDS:
        old = getattr(was, _ENTRY_ATTRIBUTE.get(name, name))
        new = getattr(now, _ENTRY_ATTRIBUTE.get(name, name))
        if old == new or (name == "sha256" and (old is None or new is None)):
            continue
        changes[name] = (old, new)
    return changes


def format_value(name: str, value: Any) -> str:
    """A field value for people: modes in octal, times in UTC ISO 8601, hashes shortened."""
    if value is None:
        return "-"
    if name == "mode" and isinstance(value, int):
        return oct(value)
    if name in {"mtime", "ctime", "atime", "crtime"} and isinstance(value, (int, float)):
        stamp = datetime.fromtimestamp(value, tz=timezone.utc)
        return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")
    if name == "sha256" and isinstance(value, str):
        return value[:12] + "…"
    return repr(value) if isinstance(value, str) else str(value)


def describe_fields(fields: Mapping[str, tuple[Any, Any]]) -> str:
    """``size 10 -> 12, mode 0o100644 -> 0o100600``."""
    return ", ".join(
        f"{name} {format_value(name, old)} -> {format_value(name, new)}"
        for name, (old, new) in fields.items()
    )


def describe_entry(entry: Entry | None) -> str:
    """``file, 120 B, mode 0o100644, uid 0, gid 0`` (empty when unknown)."""
    if entry is None:
        return ""
    text = f"{entry.kind}, {entry.size} B, mode {oct(entry.mode)}, uid {entry.uid}, gid {entry.gid}"
    return text + (f", -> {entry.target!r}" if entry.target is not None else "")


def describe_changes(
    diff: FsDiff,
    created: Iterable[str],
    deleted: Iterable[str],
    modified: Mapping[str, FieldChanges],
    limit: int,
) -> list[str]:
    """Lines ``+ path``, ``- path``, ``~ path: fields``, at most ``limit`` per group."""
    lines: list[str] = []
    groups: list[tuple[str, list[str]]] = [
        ("+", [_with_entry(p, diff.after_entries.get(p)) for p in sorted(created)]),
        ("-", [_with_entry(p, diff.before_entries.get(p)) for p in sorted(deleted)]),
        ("~", [f"{p}: {describe_fields(f)}" for p, f in sorted(modified.items())]),
    ]
    for sign, items in groups:
        lines += [f"  {sign} {item}" for item in items[:limit]]
        if len(items) > limit:
            lines.append(f"  {sign} ... and {len(items) - limit} more")
    return lines


def _with_entry(path: str, entry: Entry | None) -> str:
    described = describe_entry(entry)
    return f"{path}  ({described})" if described else path
