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
from pytest_adare.machine_tools.qga import CHUNK_SIZE, QGAClient

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


@pytest.fixture
def client(qemu_ga: Path) -> Iterator[QGAClient]:
    """A client of that qemu-ga, closed after the test (no socket left to the GC)."""
    with QGAClient(qemu_ga) as qga:
        yield qga


def test_sync_waits_for_the_agent_to_appear_then_pings(client: QGAClient) -> None:
    client.sync(timeout=10)
    client.ping()


def test_exec_returns_exit_code_stdout_and_stderr_separately(client: QGAClient) -> None:
    result = client.exec(["sh", "-c", "echo hi; echo oops >&2; exit 3"])
    assert (result.exitcode, result.stdout, result.stderr) == (3, b"hi\n", b"oops\n")


def test_exec_feeds_stdin_and_reports_a_kill_signal_as_negative(client: QGAClient) -> None:
    assert client.exec(["cat"], input_data=b"from the host").stdout == b"from the host"
    assert client.exec(["sh", "-c", "kill -9 $$"]).exitcode == -9


def test_exec_of_a_missing_program_raises_with_qgas_reason(client: QGAClient) -> None:
    with pytest.raises(QGAError, match="No such file"):
        client.exec(["/nonexistent/program"])


def test_exec_that_outlives_its_timeout_says_what_was_waited_for(client: QGAClient) -> None:
    with pytest.raises(QGAError, match=r"still running after 0\.5 s"):
        client.exec(["sleep", "5"], timeout=0.5)


def test_file_round_trip_spans_several_chunks(client: QGAClient, tmp_path: Path) -> None:
    data = os.urandom(2 * CHUNK_SIZE + 17)
    client.file_write(str(tmp_path / "blob"), data)
    assert (tmp_path / "blob").read_bytes() == data
    assert client.file_read(str(tmp_path / "blob")) == data


def test_empty_file_round_trip(client: QGAClient, tmp_path: Path) -> None:
    client.file_write(str(tmp_path / "empty"), b"")
    assert client.file_read(str(tmp_path / "empty")) == b""


def test_spawn_starts_a_detached_process(client: QGAClient, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    pid = client.spawn(["sh", "-c", f"echo $$ > {marker}"])
    result = client.exec(["sh", "-c", f"for i in $(seq 100); do [ -s {marker} ] && break; "
                          "sleep 0.05; done; cat " + str(marker)])  # fmt: skip
    assert int(result.stdout) == pid


def test_sync_skips_stale_answers_and_resets_a_half_sent_request(client: QGAClient) -> None:
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
        with QGAClient(tmp_path / "nobody.sock") as nobody:
            nobody.sync(timeout=0.5)
