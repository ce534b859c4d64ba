"""The examples in the docstrings of the hardening modules hold."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from adare_guest import backpressure, commands, protocol, tool_params, worker_pool
from adare_guest.tools import clock


@pytest.mark.parametrize(
    "module", [backpressure, protocol, worker_pool, commands, clock, tool_params]
)
def test_docstring_examples_hold(module: ModuleType) -> None:
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0 and outcome.failed == 0
