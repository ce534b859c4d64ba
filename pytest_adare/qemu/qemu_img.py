"""``qemu-img`` for the machine's own files (overlay, UEFI variables), failing clearly."""

from __future__ import annotations

import subprocess

from pytest_adare.errors import VMLaunchError

QEMU_IMG_TIMEOUT = 60.0


def qemu_img(*args: str, what: str, timeout: float = QEMU_IMG_TIMEOUT) -> None:
    """Run ``qemu-img ARGS``.

    :raise VMLaunchError: it failed; the message says ``what`` could not be done and
        carries qemu-img's command line and output.
    """
    cmd = ["qemu-img", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise VMLaunchError(
            f"could not {what}", exitcode=done.returncode, command=cmd,
            output=done.stdout + done.stderr,
        )  # fmt: skip
