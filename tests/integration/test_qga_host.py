"""QGAClient against a real qemu-ga running on the host (no VM needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.errors import QGAError
from pytest_adare.loop_thread import shared_loop
from pytest_adare.qemu.qga import CHUNK_SIZE, QGAClient

pytestmark = pytest.mark.skipif(shutil.which("qemu-ga") is None, reason="qemu-ga not installed")


@pytest.fixture
def qemu_ga(tmp_path: Path) -> Iterator[Path]:
    """A host qemu-ga listening on a Unix socket; yields the socket path."""
    sock = tmp_path / "qga.sock"
    proc = subprocess.Popen(
        ["qemu-ga", "-m", "unix-listen", "-p", str(sock), "-t", str(tmp_path),
         "--statedir", str(tmp_path)],
    )  # fmt: skip
    yield sock
    proc.kill()
    proc.wait(timeout=10)


def test_sync_waits_for_the_agent_to_appear_then_pings(qemu_ga: Path) -> None:
    client = QGAClient(qemu_ga)
    client.sync(timeout=10)
    client.ping()
    client.close()


def test_exec_returns_exit_code_stdout_and_stderr_separately(qemu_ga: Path) -> None:
    result = QGAClient(qemu_ga).exec(["sh", "-c", "echo hi; echo oops >&2; exit 3"])
    assert (result.exitcode, result.stdout, result.stderr) == (3, b"hi\n", b"oops\n")


def test_exec_feeds_stdin_and_reports_a_kill_signal_as_negative(qemu_ga: Path) -> None:
    client = QGAClient(qemu_ga)
    assert client.exec(["cat"], input_data=b"from the host").stdout == b"from the host"
    assert client.exec(["sh", "-c", "kill -9 $$"]).exitcode == -9


def test_exec_of_a_missing_program_raises_with_qgas_reason(qemu_ga: Path) -> None:
    with pytest.raises(QGAError, match="No such file"):
        QGAClient(qemu_ga).exec(["/nonexistent/program"])


def test_exec_that_outlives_its_timeout_says_what_was_waited_for(qemu_ga: Path) -> None:
    with pytest.raises(QGAError, match=r"still running after 0\.5 s"):
        QGAClient(qemu_ga).exec(["sleep", "5"], timeout=0.5)


def test_file_round_trip_spans_several_chunks(qemu_ga: Path, tmp_path: Path) -> None:
    data = os.urandom(2 * CHUNK_SIZE + 17)
    client = QGAClient(qemu_ga)
    client.file_write(str(tmp_path / "blob"), data)
    assert (tmp_path / "blob").read_bytes() == data
    assert client.file_read(str(tmp_path / "blob")) == data


def test_empty_file_round_trip(qemu_ga: Path, tmp_path: Path) -> None:
    client = QGAClient(qemu_ga)
    client.file_write(str(tmp_path / "empty"), b"")
    assert client.file_read(str(tmp_path / "empty")) == b""


def test_spawn_starts_a_detached_process(qemu_ga: Path, tmp_path: Path) -> None:
    client = QGAClient(qemu_ga)
    marker = tmp_path / "spawned"
    pid = client.spawn(["sh", "-c", f"echo $$ > {marker}"])
    result = client.exec(["sh", "-c", f"for i in $(seq 100); do [ -s {marker} ] && break; "
                          "sleep 0.05; done; cat " + str(marker)])  # fmt: skip
    assert int(result.stdout) == pid


def test_sync_skips_stale_answers_and_resets_a_half_sent_request(qemu_ga: Path) -> None:
    client = QGAClient(qemu_ga)
    client.sync(timeout=10)

    async def leave_garbage() -> None:
        writer = client.aio._writer  # what an interrupted earlier session leaves behind
        assert writer is not None
        writer.write(b'{"execute": "guest-info"}\n{"execute": "guest-pi')
        await writer.drain()

    shared_loop().run(leave_garbage())
    client.sync(timeout=10)
    assert client.exec(["echo", "fresh"]).stdout == b"fresh\n"


def test_no_agent_behind_the_socket_times_out_naming_the_socket(tmp_path: Path) -> None:
    with pytest.raises(QGAError, match=r"did not answer guest-sync-delimited within 0\.5 s"):
        QGAClient(tmp_path / "nobody.sock").sync(timeout=0.5)
