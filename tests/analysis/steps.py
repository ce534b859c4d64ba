"""Analysis steps the tests run in tool environments: standard library and Dissect only."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def desktop_artifacts(target: Any) -> dict[str, Any]:
    return {"trash": target.trash(), "recentlyused": target.recently_used()}


def crashes(target: Any) -> dict[str, Any]:
    raise RuntimeError(f"no plugin for {target.os}")


def hangs(target: Any) -> dict[str, Any]:
    time.sleep(3600)
    return {}


def dies(target: Any) -> dict[str, Any]:
    os._exit(3)


Step = Callable[[Any], dict[str, Any]]
