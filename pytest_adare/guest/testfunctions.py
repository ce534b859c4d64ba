"""The facade's guest test functions: upload a collection, install its dependencies,
set its variables, run one and read its :class:`~pytest_adare.guest.results.TestOutcome`."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adare_guest.tool_names import (
    INSTALL_DEPENDENCIES,
    RUN_TEST,
    SET_VARIABLES,
    UPLOAD_TESTFUNCTIONS,
)
from pytest_adare.agent.testfunction_upload import zip_collection
from pytest_adare.guest.core import GuestCore
from pytest_adare.guest.results import TestOutcome


class GuestTestFunctions(GuestCore):
    """Guest test functions: a collection uploaded, its dependencies, variables, runs."""

    async def upload_testfunctions(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Zip the collection ``directory`` (``D/D.py``) and upload it to the agent."""
        data = base64.b64encode(zip_collection(Path(directory))).decode("ascii")
        return await self._checked(UPLOAD_TESTFUNCTIONS, testfunctions_data=data)

    async def install_dependencies(
        self, dependencies: Sequence[str], *, prefer_binary: bool = False
    ) -> dict[str, Any]:
        """pip-install ``dependencies`` for the guest test functions."""
        return await self._checked(
            INSTALL_DEPENDENCIES, dependencies=list(dependencies), prefer_binary=prefer_binary
        )

    async def set_variables(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Set the variables guest test functions can read."""
        return await self._checked(SET_VARIABLES, variables=json.dumps(dict(variables)))

    async def run_test(self, name: str, /, **params: Any) -> TestOutcome:
        """Run the guest test function ``collection.name`` with ``params``."""
        result = await self._checked(RUN_TEST, test_name=name, resolved_test_data=params)
        verdict = result.get("result") or {}
        return TestOutcome(
            str(verdict.get("status", "UNKNOWN")), [str(d) for d in verdict.get("details", [])]
        )
