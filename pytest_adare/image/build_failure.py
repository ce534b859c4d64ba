"""Why an image build failed, in one sentence, read from its log (pure: text in).

The log holds mmdebstrap's and apt's output and the marker lines a failing provision
step, file copy or ``systemctl enable`` leaves
(:data:`~pytest_adare.image.rootfs.STEP_FAILED`, :data:`~pytest_adare.image.rootfs.FILE_FAILED`,
:data:`~pytest_adare.image.rootfs.SERVICES_FAILED`); the error that reaches
the user leads with what this finds and is followed by the log's tail.
"""

from __future__ import annotations

import re

from pytest_adare.image.recipe import Recipe

_UNKNOWN_PACKAGE = (
    re.compile(r"E: Unable to locate package (\S+)"),
    re.compile(r"E: Package '([^']+)' has no installation candidate"),
    re.compile(r"E: Couldn't find any package by (?:glob|regex) '([^']+)'"),
)
_KEPT_INIT = re.compile(
    r"(\S+) : Depends: (systemd-sysv|sysvinit-core|runit-init|openrc)\b"
    r".*not (?:going to be|be) installed"
)
_STEP = re.compile(r"adare-recipe: provision step (\d+) failed with exit code (\d+)")
_FILE = re.compile(r"(?:^|\n)(.*)\nadare-recipe: copying files\[\d+\] to (.+) failed")
_SERVICES = re.compile(
    r"(?:^|\n)(.*)\nadare-recipe: systemctl enable of the services failed with exit code (\d+)"
)
NO_NETWORK = re.compile(
    r"Temporary failure resolving|Could not resolve|Could not connect to|"
    r"Failed to fetch .*(?:Connection|resolv|timed out)|Network is unreachable"
)


def build_failure_cause(log: str, recipe: Recipe, mirror: str) -> str | None:
    """The cause of a failed root file system build, or None when the log does not say.

    >>> from pytest_adare.image.recipe import debian_recipe
    >>> build_failure_cause("E: Unable to locate package pcmanfn", debian_recipe(), "M")
    "unknown package 'pcmanfn': Debian bookworm at M has no such package"
    """
    for pattern in _UNKNOWN_PACKAGE:
        if found := pattern.search(log):
            return (
                f"unknown package {found.group(1)!r}: Debian {recipe.suite} at {mirror} "
                "has no such package"
            )
    if found := _KEPT_INIT.search(log):
        return (
            f"package {found.group(1)!r} needs {found.group(2)}, which would replace the "
            "image's init; it is held back (name an alternative, e.g. dbus-x11"
            + (
                ', or build on base = "debian-systemd")'
                if found.group(2) == "systemd-sysv"
                else ")"
            )
        )
    if found := _STEP.search(log):
        index, code = int(found.group(1)), found.group(2)
        step = recipe.provision[index - 1] if 0 < index <= len(recipe.provision) else "?"
        return f"provision step {index} ({step!r}) failed with exit code {code}"
    if found := _SERVICES.search(log):
        return (
            f"systemctl enable {' '.join(recipe.services)} failed with exit code "
            f"{found.group(2)}: {found.group(1)}"
        )
    if found := _FILE.search(log):
        return f"copying a recipe's file to {found.group(2)} in the image failed: {found.group(1)}"
    if NO_NETWORK.search(log):
        return f"no network: the build cannot reach the package mirror {mirror}"
    return None
