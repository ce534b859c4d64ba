"""The agent's log file handler: a call's INFO line waits for the event loop's next turn
(after the reply went out), a warning writes at once and in order, nothing is lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from adare_guest.deferred_log import MAX_PENDING, AgentFormatter, DeferredFileHandler


@pytest.fixture
def logger(tmp_path: Path) -> Iterator[tuple[logging.Logger, DeferredFileHandler, Path]]:
    path = tmp_path / "agent.log"
    handler = DeferredFileHandler(str(path))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger(f"test-deferred-{id(handler)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield log, handler, path
    log.removeHandler(handler)
    handler.close()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_info_line_is_written_on_the_loops_next_turn(
    logger: tuple[logging.Logger, DeferredFileHandler, Path],
) -> None:
    log, _handler, path = logger

    async def call() -> list[str]:
        log.info("done 1 get_timestamp")
        seen_before = _lines(path)  # the reply would be sent here
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return seen_before

    assert asyncio.run(call()) == []
    assert _lines(path) == ["INFO done 1 get_timestamp"]


def test_a_warning_writes_what_waits_and_itself_at_once_in_order(
    logger: tuple[logging.Logger, DeferredFileHandler, Path],
) -> None:
    log, _handler, path = logger

    async def call() -> list[str]:
        log.info("done 1")
        log.debug("call 2")
        log.warning("tool crashed")
        return _lines(path)

    assert asyncio.run(call()) == ["INFO done 1", "DEBUG call 2", "WARNING tool crashed"]


def test_outside_a_loop_a_line_is_written_at_once(
    logger: tuple[logging.Logger, DeferredFileHandler, Path],
) -> None:
    log, _handler, path = logger
    log.info("listening on 127.0.0.1:8765")
    assert _lines(path) == ["INFO listening on 127.0.0.1:8765"]


def test_held_records_are_bounded_and_close_writes_the_rest(
    logger: tuple[logging.Logger, DeferredFileHandler, Path],
) -> None:
    log, handler, path = logger

    async def burst() -> tuple[int, int]:
        for n in range(MAX_PENDING + 3):
            log.info("done %d", n)
        written = len(_lines(path))
        handler.close()  # as at shutdown: nothing left behind
        return written, len(_lines(path))

    assert asyncio.run(burst()) == (MAX_PENDING, MAX_PENDING + 3)
    assert _lines(path)[-1] == f"INFO done {MAX_PENDING + 2}"


def test_the_agents_time_stamps_read_as_loggings_own() -> None:
    plain = logging.Formatter("%(asctime)s %(message)s")
    cached = AgentFormatter("%(asctime)s %(message)s")
    for created in (1796407867.009, 1796407867.999, 1796407868.0, 1796407868.5, 1796407999.25):
        record = logging.makeLogRecord({"msg": "done", "created": created,
                                        "msecs": (created - int(created)) * 1000})  # fmt: skip
        assert cached.format(record) == plain.format(record)
