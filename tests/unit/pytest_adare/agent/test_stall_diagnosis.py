"""Why a connected agent went silent, decided from its health report (no VM needed), and
the timeout that carries it instead of "(last console lines: none)" alone (issue 34)."""

from __future__ import annotations

from typing import Any

from adare_guest.activity import describe_calls
from pytest_adare.agent.stall_diagnosis import agent_connections, describe_health, stall_cause
from pytest_adare.errors import AgentUnresponsive, VMTimeout


def health(**fields: Any) -> dict[str, Any]:
    report = {"loop_late": 0.0, "calls": "", "workers": "0 busy, 0 queued, 0 abandoned"}
    report.update({"sessions": 1, "last_error": None, **fields})
    return report


def test_no_serial_answer_either_means_the_process_is_stopped_gone_or_the_guest_hung() -> None:
    assert "serial link did not answer either" in stall_cause(None, "run_test", 61)


def test_a_late_heartbeat_names_the_blocked_event_loop() -> None:
    cause = stall_cause(health(loop_late=58.2, calls="run_test 60s"), "run_test", 61)
    assert cause.startswith("the agent's event loop is blocked (58 s late")


def test_a_beating_loop_without_the_call_means_the_call_or_its_answer_was_lost() -> None:
    cause = stall_cause(health(calls="execute_shell 3s"), "run_test", 61)
    assert "no 'run_test' call is running: the call or its answer was lost" in cause


def test_a_beating_loop_running_the_call_means_the_sessions_reader_is_held() -> None:
    report = health(calls=describe_calls([("run_test", 61.0), ("run_test_x", 5.0)]))
    assert "'run_test' is running" in stall_cause(report, "run_test", 61)
    # A tool whose name starts like another is not taken for it.
    assert "no 'run_test_' call" in stall_cause(report, "run_test_", 61)


def test_a_call_still_running_on_an_agent_that_answers_pings_is_only_slow() -> None:
    # A command longer than its call's timeout: the pings were answered (0 s silent).
    cause = stall_cause(health(calls="execute_shell 117s"), "execute_shell", 0.0)
    assert "the agent answers and its 'execute_shell' call is still running" in cause
    assert "held up" not in cause


def test_the_health_line_lists_the_loop_calls_and_workers() -> None:
    line = describe_health(health(loop_late=2.5, calls="run_test 9s", last_error="boom"))
    assert line == (
        "loop 2.5 s late; calls: run_test 9s; workers: 0 busy, 0 queued, 0 abandoned; "
        "sessions: 1; last error: boom"
    )
    assert describe_health(health()).startswith("loop on time; calls: none;")


def test_calls_are_listed_oldest_first_and_counted_past_six() -> None:
    calls = [(f"t{n}", float(n)) for n in range(8)]
    assert describe_calls(calls) == "t7 7s, t6 6s, t5 5s, t4 4s, t3 3s, t2 2s and 2 more"


def test_a_timeout_says_what_the_agent_was_doing_before_the_console_tail() -> None:
    error = VMTimeout("the agent's answer to 'run_test'", 300.0, ["login:"], ["cause: x\x1b[2J"])
    assert str(error).splitlines() == [
        "timed out after 300.0 s waiting for the agent's answer to 'run_test'",
        "cause: x\\x1b[2J",
        "last console lines:",
        "  | login:",
    ]
    silent = AgentUnresponsive("'run_test' was awaited", 61.2, [], ["cause: y"])
    assert isinstance(silent, VMTimeout)
    assert str(silent).splitlines()[0] == (
        "the agent answered nothing, not even a ping, for 61 s while 'run_test' was awaited"
    )


PROC_NET_TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    # the agent listening, then its connection from the host holding a 4 KiB answer unsent
    "   0: 00000000:494D 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0\n"
    "   1: 0F02000A:494D 0202000A:C350 01 00001000:00000000 00:00000000 00000000 0\n"
    "   2: 0F02000A:0016 0202000A:C351 01 00000005:00000000 00:00000000 00000000 0\n"
)


def test_the_agents_connections_show_what_waits_in_their_queues() -> None:
    assert agent_connections(PROC_NET_TCP, 18765) == [
        "from 10.0.2.2:50000: 4096 B unsent, 0 B unread"
    ]
    assert agent_connections(PROC_NET_TCP, 22) == ["from 10.0.2.2:50001: 5 B unsent, 0 B unread"]
    assert agent_connections("garbage\n   9: zz:zz yy:yy 01 q:r\n", 18765) == []
