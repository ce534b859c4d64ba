"""A private Xvfb for a test: Xvfb picks its own display number and reports it."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
from collections.abc import Iterator

import pytest

WAIT = 30.0


@contextlib.contextmanager
def private_display(size: str = "1024x768x24") -> Iterator[str]:
    """``":N"`` of a new Xvfb, stopped when the block ends; skips without Xvfb."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-screen", "0", size, "-nolisten", "tcp"],
        pass_fds=(write_end,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], WAIT)
        number = os.read(read_end, 32).decode().strip() if ready else ""
        assert number, f"Xvfb did not report its display number within {WAIT} s"
        yield f":{number}"
    finally:
        os.close(read_end)
        proc.terminate()
        proc.wait(10)
