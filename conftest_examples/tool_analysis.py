"""The analysis steps of test_tool_validation.py: what Dissect reads of the desktop disk.

They run in each ``--adare-tool`` version's own environment, which holds Dissect and
nothing of the test's: this module imports only the standard library. One plugin per
step: a Dissect plugin with nothing to read (no Trash yet) refuses to run at all.
"""

from __future__ import annotations

from typing import Any


def trash(target: Any) -> dict[str, Any]:
    """The user's Trash (fields ts, path, deleted_path, filesize, source)."""
    return {"trash": target.trash()}


def recently_used(target: Any) -> dict[str, Any]:
    """recently-used.xbel (fields ts, user, href, added, modified, visited, mimetype)."""
    return {"recentlyused": target.recently_used()}


def login(target: Any) -> dict[str, Any]:
    """The login records of a systemd desktop: ``/var/log/wtmp`` (fields ts, ut_type,
    ut_user, ut_line, ut_host, ...) and the journal (ts, message, syslog_identifier, ...)."""
    return {"wtmp": target.wtmp(), "journal": target.journal()}
