"""A recipe over a disk that is not built in: boot the base, run the steps, keep a layer.

The base boots as the plugin boots it (``VM``: QGA or cloud-init delivers the agent);
the packages go in with the guest's own package manager (apt-get, dnf, zypper or
pacman, whichever it has), then the files and the provision commands, as root. Then
the build removes its traces (the agent's run directory, shell histories, package
caches, the journal) and powers the guest off cleanly; the VM's overlay is exactly
what the build changed, so it becomes the image's disk: a qcow2 layer over the base,
or with ``flatten`` one standalone qcow2. The manifest records the base's sha256 and
the steps. :func:`build_on_disk` is the ``BootedBuilder`` that ``image.recipe_build``
calls; it writes into a directory that is renamed into the cache only when complete.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from pytest_adare.errors import ImageError, format_tail
from pytest_adare.file_hash import file_sha256
from pytest_adare.guest import Guest, ShellResult
from pytest_adare.image.build import PhaseClock
from pytest_adare.image.build_failure import NO_NETWORK
from pytest_adare.image.manifest import ImageManifest, write_manifest
from pytest_adare.image.recipe_build import Progress, base_identity
from pytest_adare.image.recipe_file import ImageRecipe, enable_command
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions

INSTALL_TIMEOUT = 1800.0
POWEROFF_TIMEOUT = 180.0


@dataclass(frozen=True)
class PackageManager:
    """One distribution's package manager: how to install, what "no such package" reads
    like, how to drop its caches."""

    name: str
    refresh: str
    install: str
    unknown: re.Pattern[str]
    clean: str


PACKAGE_MANAGERS = (
    PackageManager(
        "apt-get",
        "apt-get update -q",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {pkgs}",
        re.compile(r"Unable to locate package (\S+)|Package '([^']+)' has no installation"),
        "apt-get clean; rm -rf /var/lib/apt/lists/*",
    ),
    PackageManager(
        "dnf",
        "dnf makecache -q",
        "dnf install -y {pkgs}",
        re.compile(r"No match for argument: (\S+)()"),
        "dnf clean all",
    ),
    PackageManager(
        "zypper",
        "zypper --non-interactive refresh",
        "zypper --non-interactive install {pkgs}",
        re.compile(r"No provider of '([^']+)' found()"),
        "zypper clean --all",
    ),
    PackageManager(
        "pacman",
        "pacman -Sy --noconfirm",
        "pacman -S --noconfirm --needed {pkgs}",
        re.compile(r"target not found: (\S+)()"),
        "pacman -Scc --noconfirm",
    ),
)
# The package that provides /sbin/init is held, so no install can replace the init.
_HOLD_INIT = (
    'p=$(dpkg -S "$(readlink -f /sbin/init)" 2>/dev/null | cut -d: -f1) && '
    '[ -n "$p" ] && apt-mark hold "$p" >/dev/null'
)


def detect_package_manager(guest: Guest) -> PackageManager:
    """The first of apt-get, dnf, zypper, pacman the guest has.

    :raise ImageError: it has none of them.
    """
    names = " ".join(pm.name for pm in PACKAGE_MANAGERS)
    found = guest.shell(f"for c in {names}; do command -v $c >/dev/null && echo $c; done")
    have = found.stdout.split()
    for pm in PACKAGE_MANAGERS:
        if pm.name in have:
            return pm
    raise ImageError(f"the base has no package manager this build knows ({names})")


def _tail(result: ShellResult, lines: int = 15) -> str:
    text = (result.stdout + "\n" + result.stderr).strip().splitlines()
    return format_tail(text[-lines:], "its last lines")


_URL = re.compile(r"\b(?:https?|ftp)://[^\s/'\"]+")


def no_network(what: str, result: ShellResult) -> str | None:
    """"The guest has no network", naming what was tried and the mirrors it could not
    reach, when ``result``'s output reads like that; else None.

    >>> out = "Err:1 http://deb.debian.org/debian\\n  Temporary failure resolving 'x'"
    >>> print(no_network("apt-get update", ShellResult(0, out, "", "")).splitlines()[0])
    the guest has no network: apt-get update could not reach http://deb.debian.org \
(Temporary failure resolving 'x')
    """
    output = result.stdout + "\n" + result.stderr
    cause = NO_NETWORK.search(output)
    if cause is None:
        return None
    line = next(ln for ln in output.splitlines() if cause.group(0) in ln).strip()
    mirrors = ", ".join(dict.fromkeys(_URL.findall(output))) or "its package mirror"
    return f"the guest has no network: {what} could not reach {mirrors} ({line})\n{_tail(result)}"


def install_packages(guest: Guest, pm: PackageManager, packages: tuple[str, ...]) -> None:
    """:raise ImageError: no network, an unknown package (named), or the install failed."""
    if pm.name == "apt-get":
        guest.shell(_HOLD_INIT)
    refreshed = guest.shell(pm.refresh, timeout=INSTALL_TIMEOUT)
    if reason := no_network(pm.refresh, refreshed):
        raise ImageError(reason)
    words = " ".join(shlex.quote(p) for p in packages)
    done = guest.shell(pm.install.format(pkgs=words), timeout=INSTALL_TIMEOUT)
    if done.ok:
        return
    output = done.stdout + done.stderr
    if found := pm.unknown.search(output):
        raise ImageError(
            f"unknown package {found.group(1) or found.group(2)!r}: {pm.name} has no such "
            f"package\n{_tail(done)}"
        )
    if reason := no_network(f"{pm.name} install", done):
        raise ImageError(reason)
    raise ImageError(
        f"{pm.name} install {' '.join(packages)} failed with exit code {done.returncode}\n"
        f"{_tail(done)}"
    )


def copy_files(guest: Guest, recipe: ImageRecipe) -> None:
    """The recipe's files, each with its owner and mode."""
    for copy in recipe.files:
        dest = shlex.quote(copy.dest)
        (guest.shell(f'mkdir -p "$(dirname {dest})"')).check()
        guest.push(copy.source, copy.dest)
        if copy.owner is not None:
            (guest.shell(f"chown {shlex.quote(copy.owner)} {dest}")).check()
        if copy.mode is not None:
            (guest.shell(f"chmod {copy.mode:o} {dest}")).check()


def run_provision(guest: Guest, recipe: ImageRecipe) -> None:
    """:raise ImageError: a step exited non-zero (names the step, its code and output)."""
    for index, step in enumerate(recipe.provision, 1):
        done = guest.shell(step, timeout=INSTALL_TIMEOUT)
        if not done.ok:
            raise ImageError(
                f"provision step {index} ({step!r}) failed with exit code {done.returncode}\n"
                f"{_tail(done)}"
            )


def enable_services(guest: Guest, recipe: ImageRecipe) -> None:
    """``systemctl enable`` the recipe's units in the booted base.

    :raise ImageError: the base has no systemd, or systemctl failed (its output)."""
    if not guest.shell("command -v systemctl").ok:
        raise ImageError(
            f"recipe {recipe.path}: 'services' needs a systemd guest; {recipe.base} has no "
            "systemctl"
        )
    done = guest.shell(enable_command(recipe.services), timeout=INSTALL_TIMEOUT)
    if not done.ok:
        raise ImageError(
            f"systemctl enable {' '.join(recipe.services)} failed with exit code "
            f"{done.returncode}\n{_tail(done)}"
        )


def trace_removal(run_dir: str, pm: PackageManager | None) -> str:
    """The shell script that removes the build's traces and powers the guest off."""
    clean = pm.clean if pm is not None else ":"
    return "; ".join((
        "sleep 2",  # the agent's answer to this call leaves first
        clean,
        "command -v cloud-init >/dev/null && cloud-init clean --logs",
        "rm -f /root/.bash_history /root/.python_history /root/.lesshst /home/*/.bash_history",
        "rm -rf /var/log/journal/* /run/log/journal/*",
        f"rm -rf {shlex.quote(run_dir)}",
        "sync",
        "systemctl poweroff || poweroff || busybox poweroff",
    ))  # fmt: skip


def _steps(vm: VM, recipe: ImageRecipe, clock: PhaseClock) -> None:
    guest = vm.guest
    pm = None
    if recipe.install:
        with clock.phase("install", " ".join(recipe.install)):
            pm = detect_package_manager(guest)
            install_packages(guest, pm, recipe.install)
    else:
        pm = next((p for p in PACKAGE_MANAGERS if guest.shell(f"command -v {p.name}").ok), None)
    if recipe.files:
        with clock.phase("files", f"{len(recipe.files)} file(s)"):
            copy_files(guest, recipe)
    if recipe.provision:
        with clock.phase("provision", f"{len(recipe.provision)} command(s)"):
            run_provision(guest, recipe)
    if recipe.services:
        with clock.phase("services", " ".join(recipe.services)):
            enable_services(guest, recipe)
    guest.shell(trace_removal(str(vm.state.layout.run_dir), pm), background=True)


def _wait_powered_off(vm: VM) -> None:
    deadline = time.monotonic() + POWEROFF_TIMEOUT
    while vm.machine.is_running():
        if time.monotonic() > deadline:
            raise ImageError(
                f"the guest did not power off within {POWEROFF_TIMEOUT:.0f} s after the build"
            )
        time.sleep(0.5)


def _keep_disk(overlay: Path, base: ImageManifest, out: Path, flatten: bool) -> Path:
    disk = out / "disk.qcow2"
    if flatten:
        argv = ["qemu-img", "convert", "-O", "qcow2", str(overlay), str(disk)]
        subprocess.run(argv, check=True, capture_output=True, timeout=1800)
    else:  # the overlay already holds exactly the build's writes over the base
        shutil.move(str(overlay), disk)
        rebase = ["qemu-img", "rebase", "-u", "-F", base.format, "-b", str(base.disk), str(disk)]
        subprocess.run(rebase, check=True, capture_output=True, timeout=60)
    return disk


def build_on_disk(
    base: ImageManifest, recipe: ImageRecipe, out: Path, *, flatten: bool, progress: Progress
) -> Path:
    """Boot ``base``, run ``recipe``'s steps, keep the result in ``out`` (a ``BootedBuilder``).

    :raise ImageError: a step failed (the message says which and why); ``out`` is then
        incomplete and the caller discards it.
    """
    clock = PhaseClock(progress)
    with tempfile.TemporaryDirectory(prefix="adare-recipe-") as tmp:
        vm = VM(base, Path(tmp), VMOptions(), name=f"build-{recipe.name}")
        try:
            with clock.phase("boot", f"the base {base.name}"):
                vm.start(progress=lambda line: progress(f"  {line}"))
            _steps(vm, recipe, clock)
            with clock.phase("poweroff", "build traces removed"):
                _wait_powered_off(vm)
        finally:
            vm.close()
        with clock.phase("disk", "standalone qcow2" if flatten else "qcow2 layer over the base"):
            disk = _keep_disk(vm.machine.overlay_path, base, out, flatten)
    manifest = replace(
        base,
        name=recipe.name,
        disk=disk,
        format="qcow2",
        disk_sha256=file_sha256(disk),
        base_sha256=base_identity(base),
        steps={"base": str(base.path or base.disk), **recipe.steps()},
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        path=None,
    )
    return write_manifest(manifest, out)
