"""``guest.run_playbook(path)``: an adare experiment run from a Python test."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.guest_api import PlaybookGuest
from pytest_adare.playbook.load import load_experiment
from pytest_adare.playbook.results import PlaybookResult
from pytest_adare.playbook.runner import run_playbook


def run_experiment(
    guest: PlaybookGuest,
    path: str | os.PathLike[str],
    *,
    variables: Mapping[str, Any] | None = None,
    artifacts: str | os.PathLike[str] | None = None,
) -> PlaybookResult:
    """Run the experiment at ``path`` (its folder or its ``playbook.yml``) on ``guest``.

    ``variables`` replace declared ones of the same name (and may add others). Pulled
    files, screenshots and ``playbook-results.json`` go to ``artifacts`` (default: a new
    temporary directory, ``result``'s record says where).

    :raise PlaybookError: the playbook cannot be read (file, line, field).
    """
    target = Path(path)
    playbook_path = target / "playbook.yml" if target.is_dir() else target
    if not playbook_path.is_file():
        raise PlaybookError(playbook_path, "no playbook.yml there")
    experiment = load_experiment(playbook_path)
    folder = (
        Path(artifacts)
        if artifacts is not None
        else Path(tempfile.mkdtemp(prefix=f"adare-{experiment.name}-"))
    )
    return run_playbook(guest, experiment.playbook, folder, variables=variables)
