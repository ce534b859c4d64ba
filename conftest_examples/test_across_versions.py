"""Forensic scenario for the image matrix: what a shell session leaves in its history.

On one image it is a test like any other; across releases it shows the artifact side
by side, with the cells that differ marked (docs/matrix.md):

    pytest --adare-vm=debian:bullseye --adare-vm=debian:bookworm test_across_versions.py
"""

from pytest_adare.guest import Guest
from pytest_adare.plugin.checks import SoftChecks
from pytest_adare.plugin.image_facts import ImageInfo
from pytest_adare.plugin.records import Recorder


def test_shell_history_keeps_the_command(
    guest: Guest, adare_image: ImageInfo, adare_checks: SoftChecks, adare_record: Recorder
) -> None:
    guest.shell(
        "printf 'echo wiped > /tmp/evidence\\nexit\\n' | HISTFILE=/root/.bash_history bash -i"
    ).check()
    history = guest.shell("cat /root/.bash_history").stdout
    adare_checks.check("echo wiped" in history, "the command is in ~/.bash_history", history)
    stat = guest.shell("stat -c '%a %U' /root/.bash_history").check().stdout.strip()
    adare_record("history mode and owner", stat)
    adare_record("bash", guest.shell("bash --version | head -n 1").check().stdout.strip())
    adare_record("os", f"{adare_image.distribution} {adare_image.version}")
