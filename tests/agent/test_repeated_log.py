"""Repeated log lines are rate-limited per kind (issue 27, item 10: no log storm)."""

from __future__ import annotations

import doctest
import logging

import pytest

from adare_guest import repeated_log
from adare_guest.repeated_log import RepeatedLog


def test_docstring_example_holds() -> None:
    outcome = doctest.testmod(repeated_log)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_each_kind_gets_one_line_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = RepeatedLog(logging.getLogger("test.repeated"), interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "test.repeated"):
        for second in range(25):
            now[0] = float(second)
            log.warning("accept", "cannot accept: %s", "EMFILE")
            log.info("timeout", "client %s was silent", second)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "cannot accept: EMFILE",
        "client 0 was silent",
        "cannot accept: EMFILE (9 more in the last 10 s)",
        "client 10 was silent (9 more in the last 10 s)",
        "cannot accept: EMFILE (9 more in the last 10 s)",
        "client 20 was silent (9 more in the last 10 s)",
    ]
