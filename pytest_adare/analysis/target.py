"""Open an exported disk with Dissect: ``open_target(path)`` gives a read-only ``Target``.

Dissect opens image files for reading only, so the export is never changed by an
analysis; it is imported on first use (the ``analysis`` extra, ``pytest-adare[analysis]``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_adare.analysis.errors import AnalysisUnavailable, EvidenceUnreadable

EXTRA_HINT = "install pytest-adare[analysis] (dissect.target and dissect.extfs)"


def open_target(path: str | os.PathLike[str]) -> Any:
    """A ``dissect.target.Target`` over the disk file at ``path`` (raw or qcow2).

    :raise AnalysisUnavailable: dissect.target is not installed.
    :raise EvidenceUnreadable: no readable regular file there, or Dissect finds no file
        system it can read on it (naming the path and the reason).
    """
    disk = Path(path)
    if not disk.is_file():
        raise EvidenceUnreadable(f"no disk export at {disk}")
    if not os.access(disk, os.R_OK):
        raise EvidenceUnreadable(f"the disk export {disk} is not readable by this user")
    try:
        # Optional and heavy (a plugin registry of hundreds of modules): on first use.
        from dissect.target import Target
        from dissect.target.exceptions import TargetError
    except ImportError as error:
        why = f"dissect.target is not importable ({error}): {EXTRA_HINT}"
        raise AnalysisUnavailable(why) from None
    try:
        target = Target.open(disk)
    except TargetError as error:
        raise EvidenceUnreadable(f"Dissect cannot open {disk}: {error}") from None
    if not list(target.filesystems):
        raise EvidenceUnreadable(
            f"Dissect finds no file system it can read on {disk} (ext4 needs dissect.extfs: "
            f"{EXTRA_HINT})"
        )
    return target
