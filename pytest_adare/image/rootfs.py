"""The root file system of a built-in image: mmdebstrap, then the adare layout.

PID 1 is busybox ``init`` with an inittab generated from the recipe: a sysinit
script (mounts, static network, fw_cfg hand-off), respawned ``qemu-ga``, agent
and root shell on ``ttyS0``. No systemd there: under TCG it costs seconds of boot.
A ``systemd`` recipe (``debian-systemd``) has Debian's systemd as PID 1 instead; the
same sysinit and agent scripts run as units (:func:`systemd_units`), qemu-ga from
Debian's own unit, and the journal is kept on the disk.

The same steps run as root or as an ordinary user (``image.userns``): what this
process writes goes into an *overlay* tree it owns, and every change to the root file
system itself is a command run through the build's :data:`BuildPrivilege` (merge the
overlay, ``depmod``, strip), so the files are root's either way.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_adare.errors import ImageError, format_tail
from pytest_adare.file_hash import stream_sha256
from pytest_adare.image.build_claim import detach, mounts_inside
from pytest_adare.image.initrd import module_load_order
from pytest_adare.image.recipe import Recipe
from pytest_adare.image.recipe_file import FileCopy, enable_command, open_source
from pytest_adare.image.userns import BuildPrivilege

# Leave out what nobody reads inside a test guest.
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
_BUSYBOX_POWER = ("poweroff", "reboot", "halt")


def run_logged(
    argv: list[str], log: Path, what: str, timeout: float, hold: tuple[int, ...] = ()
) -> None:
    """Run a build command with its output appended to ``log`` (``hold``: descriptors it
    inherits, e.g. the build's claim on its work directory).

    :raise ImageError: it failed or ran out of time; the message holds the log's tail.
    """
    with log.open("ab") as handle:
        handle.write(f"$ {' '.join(argv)}\n".encode())
        handle.flush()
        try:
            result = subprocess.run(
                argv,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
                pass_fds=hold,
            )
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"{what} took longer than {timeout:.0f} s\n{_tail(log)}") from exc
    if result.returncode != 0:
        raise ImageError(f"{what} failed with exit code {result.returncode}\n{_tail(log)}")


def _tail(log: Path, lines: int = 25) -> str:
    return format_tail(
        log.read_text(errors="replace").splitlines()[-lines:], f"last lines of {log}"
    )


# After copying the kernel out, purge it and what only it needed. Always through
# ``chroot``: a hook must never run the host's apt or dpkg on the host.
_KERNEL_ONLY_PACKAGES = (
    "initramfs-tools",
    "initramfs-tools-core",
    "klibc-utils",
    "libklibc",
    "linux-base",
    "cpio",
    "udev",
)


# What each of them needs of the others (their Depends in bullseye and bookworm): a
# recipe that installs one keeps these too, else dpkg refuses the purge and the build fails.
_KERNEL_ONLY_NEEDS = {
    "initramfs-tools": ("initramfs-tools-core", "linux-base"),
    "initramfs-tools-core": ("klibc-utils", "cpio", "udev"),
    "klibc-utils": ("libklibc",),
}


def kept_kernel_packages(packages: tuple[str, ...]) -> set[str]:
    """Of the kernel-only packages, those a recipe of ``packages`` keeps: the ones it
    installs and what they need of the others."""
    kept = {p for p in packages if p in _KERNEL_ONLY_PACKAGES}
    todo = list(kept)
    while todo:
        for needed in _KERNEL_ONLY_NEEDS.get(todo.pop(), ()):
            if needed not in kept:
                kept.add(needed)
                todo.append(needed)
    return kept


def _purge_kernel_hook(recipe: Recipe) -> str:
    kept = kept_kernel_packages(recipe.packages)
    extra = " ".join(p for p in _KERNEL_ONLY_PACKAGES if p not in kept)
    return (
        'chroot "$1" sh -c \'dpkg --purge '
        '$(dpkg-query -W -f="\\${Package} " "linux-image-*") ' + extra
        + f" && rm -f {_UPDATE_INITRAMFS} && {_DIVERT_INITRAMFS} --remove {_UPDATE_INITRAMFS}'"
    )


# Installing the kernel runs update-initramfs twice (the kernel's postinst, then
# initramfs-tools' trigger): each packs a ~30 MiB initramfs the image never boots
# (initrd.py makes its own, /boot is dropped), together 15 s of a console image's 65 s
# (bench/image_build.py). During the build a diversion puts /bin/true in its
# place, before any package goes in; the purge hook above takes it away again (and
# renames a recipe's own initramfs-tools back into place).
_UPDATE_INITRAMFS = "/usr/sbin/update-initramfs"
_DIVERT_INITRAMFS = (
    f"dpkg-divert --quiet --local --rename --divert {_UPDATE_INITRAMFS}.adare-build"
)
NO_INITRAMFS_HOOK = (
    f'chroot "$1" sh -c \'{_DIVERT_INITRAMFS} --add {_UPDATE_INITRAMFS}'
    f" && ln -s /bin/true {_UPDATE_INITRAMFS}'"
)


# No package may replace the image's init: apt never installs these (an install that
# needs one fails and names it instead). Written before the first package goes in.
_OTHER_INITS = {"busybox": "systemd-sysv sysvinit-core runit-init openrc",
                "systemd": "sysvinit-core runit-init openrc"}  # fmt: skip


def keep_init_preferences(init: str) -> str:
    """The apt preferences that keep every other init out of an image of ``init``."""
    return f"Package: {_OTHER_INITS[init]}\nPin: release *\nPin-Priority: -1\n"


KEEP_INIT_PATH = "etc/apt/preferences.d/adare-keep-init"
STEP_FAILED = "adare-recipe: provision step {index} failed with exit code"
"""The line a failing provision step leaves in the build log (the error quotes it)."""
FILE_FAILED = "adare-recipe: copying files[{index}] to {dest} failed"
"""The line a file that could not be copied in leaves in the build log."""
SERVICES_FAILED = "adare-recipe: systemctl enable of the services failed with exit code"
"""The line a failing ``systemctl enable`` of a recipe's ``services`` leaves in the log."""
SANDBOX = Path(__file__).with_name("sandbox_enter.py")


def _keep_init_hook(scratch: Path, init: str) -> str:
    preferences = scratch / "adare-keep-init"
    preferences.write_text(keep_init_preferences(init))
    return f'mkdir -p "$1/etc/apt/preferences.d" && cp {preferences} "$1/{KEEP_INIT_PATH}"'


def _sandboxed(scratch: Path, python: str, reads: list[Path], argv: list[str]) -> str:
    """A hook command that runs ``argv`` in the root ``$1`` cut off from the host
    (``sandbox_enter.py``), with ``reads`` open as its descriptors 3, 4, ..."""
    words = [shlex.quote(python), "-I", shlex.quote(str(scratch / SANDBOX.name)), '"$1"']
    for path in reads:
        words += ["--read", shlex.quote(str(path))]
    return " ".join([*words, "--", *(shlex.quote(arg) for arg in argv)])


def _copy_script(recipe: Recipe) -> str:
    """The shell that copies the recipe's files (descriptors 3, 4, ...) in, run inside the
    sandbox: every destination, symlinks included, resolves in the image's root."""
    lines = []
    for index, copy in enumerate(recipe.files):
        dest = shlex.quote(copy.dest)
        steps = [
            f"mkdir -p {shlex.quote(posixpath.dirname(copy.dest))}",
            f"cat /proc/self/fd/{3 + index} > {dest}",
        ]
        if copy.owner is not None:
            steps.append(f"chown {shlex.quote(copy.owner)} {dest}")
        steps.append(f"chmod {copy.mode:o} {dest}")
        failed = shlex.quote(FILE_FAILED.format(index=index, dest=copy.dest))
        lines.append(f"{{ {' && '.join(steps)}; }} || {{ echo {failed}; exit 1; }}")
    return "\n".join(lines) + "\n"


def stage_file(copy: FileCopy, target: Path) -> None:
    """Copy ``copy``'s source to ``target`` (a new file, 0600), checking it is still the
    content the recipe's hash covers.

    :raise ImageError: the source is gone, not a regular file, or changed.
    """
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open_source(copy.source) as source, os.fdopen(fd, "wb") as sink:
        digest = stream_sha256(source, sink)
    if digest != copy.sha256:
        raise ImageError(
            f"{copy.source} changed since its recipe was read (copied to {copy.dest}); build again"
        )


def _recipe_hooks(recipe: Recipe, scratch: Path, python: str) -> list[str]:
    """Customize hooks for the desktop user, the copied files and the provision steps, in
    that order. The user's files and steps run in the sandbox (``sandbox_enter.py``),
    never on the host nor under a bare ``chroot``; the files are staged in ``scratch``
    (0700, files 0600) and reach it as open descriptors."""
    hooks = []
    if recipe.user is not None:
        script = scratch / "desktop-user.sh"
        script.write_bytes(recipe.script("desktop-user.sh"))
        hooks.append(f'chroot "$1" /bin/sh -s {shlex.quote(recipe.user)} < {script}')
    if not recipe.files and not recipe.provision and not recipe.services:
        return hooks
    shutil.copyfile(SANDBOX, scratch / SANDBOX.name)
    if recipe.files:
        sources = scratch / "files"
        sources.mkdir(mode=0o700)
        staged = [sources / str(number) for number in range(len(recipe.files))]
        for copy, target in zip(recipe.files, staged, strict=True):
            stage_file(copy, target)
        argv = ["/bin/sh", "-c", _copy_script(recipe)]
        hooks.append(_sandboxed(scratch, python, staged, argv))
    for index, step in enumerate(recipe.provision, 1):
        script = scratch / f"provision-{index}.sh"
        script.write_text(step + "\n")
        hooks.append(_script_hook(scratch, python, script, STEP_FAILED.format(index=index)))
    if recipe.services:
        # Offline, as in a distribution's own image build: systemctl follows each unit's
        # [Install] section and makes the links; systemd starts them at every boot.
        script = scratch / "services.sh"
        script.write_text(enable_command(recipe.services) + "\n")
        hooks.append(_script_hook(scratch, python, script, SERVICES_FAILED))
    return hooks


def _script_hook(scratch: Path, python: str, script: Path, failed: str) -> str:
    """The hook that runs ``script`` in the sandbox and, when it fails, leaves ``failed``
    and its exit code in the build log (what :mod:`~pytest_adare.image.build_failure`
    reads) and stops the build."""
    run = _sandboxed(scratch, python, [script], ["/bin/sh", "/proc/self/fd/3"])
    return f'{run}; rc=$?; if [ "$rc" -ne 0 ]; then echo "{failed} $rc"; exit "$rc"; fi'


def hook_python(privilege: BuildPrivilege) -> str:
    """The Python the sandbox hooks run: this one, or for a rootless build (whose root, a
    subordinate id, may not enter the user's home) the system's."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if privilege.mmdebstrap_mode == "unshare" and system is not None:
        return system
    return sys.executable


def _private_scratch(scratch: Path, log: Path, privilege: BuildPrivilege) -> None:
    """``scratch`` (0700) becomes the build root's own: mmdebstrap's unshare-mode root is
    a subordinate id, which may read it then, and no other user may."""
    if privilege.mmdebstrap_mode == "unshare":
        argv = privilege.wrap(["chown", "-R", "0:0", str(scratch)])
        run_logged(argv, log, "handing the recipe's files to the build's root", timeout=300)


def bootstrap(
    recipe: Recipe,
    target: Path,
    kernel_dir: Path,
    mirror: str,
    log: Path,
    privilege: BuildPrivilege,
    hold: tuple[int, ...] = (),
) -> None:
    """Install the recipe's packages into ``target`` with ``mmdebstrap`` (as root, or in
    its ``unshare`` mode for an ordinary user), then its desktop user, files and
    provision steps. mmdebstrap and its hooks inherit ``hold``.

    The kernel's ``/boot`` and ``/lib/modules`` are copied to ``kernel_dir`` and the
    kernel packages are purged from ``target``.
    """
    kernel_dir.mkdir(parents=True)
    scratch = kernel_dir.parent / "hooks"
    scratch.mkdir(mode=0o700)
    hooks = _recipe_hooks(recipe, scratch, hook_python(privilege))
    setup_hook = _keep_init_hook(scratch, recipe.init)
    _private_scratch(scratch, log, privilege)
    argv = [
        "mmdebstrap",
        "--variant=essential",
        f"--mode={privilege.mmdebstrap_mode}",
        "--include=" + ",".join((*recipe.packages, recipe.kernel_package)),
        '--aptopt=Acquire::Retries "3"',
        *(f"--dpkgopt={rule}" for rule in _DPKG_EXCLUDES),
        *(f"--dpkgopt=path-exclude={glob}" for glob in recipe.dpkg_excludes),
        f"--customize-hook=copy-out /boot /lib/modules {kernel_dir}",
        f"--setup-hook={setup_hook}",
        f"--essential-hook={NO_INITRAMFS_HOOK}",
        f"--customize-hook={_purge_kernel_hook(recipe)}",
        *(f"--customize-hook={hook}" for hook in hooks),
        recipe.suite,
        str(target),
        mirror,
    ]
    run_logged(argv, log, f"mmdebstrap {recipe.suite} from {mirror}", timeout=1800, hold=hold)
    detach_leftover_mounts(target, log)


def detach_leftover_mounts(rootfs: Path, log: Path) -> None:
    """Detach what mmdebstrap left mounted in ``rootfs``. In root mode its mounts are the
    host's: when its ``umount`` of ``/proc`` finds the target busy (a process had
    something open there for a moment) it only warns and succeeds, and the next steps
    would read, size and copy the host's ``/proc`` into the image. In ``unshare`` mode
    nothing of it is mounted here.

    :raise ImageError: a mount is still there (named).
    """
    mounts = mounts_inside(rootfs)
    if not mounts:
        return
    with log.open("a") as handle:
        handle.write(f"detaching what mmdebstrap left mounted: {', '.join(map(str, mounts))}\n")
    detach(mounts)
    left = mounts_inside(rootfs)
    if left:
        raise ImageError(
            f"cannot detach what mmdebstrap left mounted in {rootfs}: "
            f"{', '.join(map(str, left))}\n{_tail(log)}"
        )


def kernel_version(kernel_dir: Path) -> str:
    """The single kernel version copied out to ``kernel_dir``."""
    versions = sorted(p.name for p in (kernel_dir / "modules").iterdir())
    if len(versions) != 1:
        raise ImageError(f"expected one kernel in {kernel_dir}/modules, found {versions}")
    return versions[0]


def inittab(recipe: Recipe) -> str:
    """busybox init's table: sysinit, the respawned services, the console shell."""
    lines = [
        "::sysinit:/adare/init/sysinit.sh",
        "::respawn:/adare/init/qga-service.sh",
        "::respawn:/adare/init/agent-service.sh",
        *recipe.inittab_extra,
        "ttyS0::respawn:-/bin/sh",
        "::ctrlaltdel:/bin/busybox reboot",
        "::shutdown:/bin/busybox sync",
        "::shutdown:/bin/busybox umount -a -r",
    ]
    return "\n".join(lines) + "\n"


# The units of a systemd image (in /etc/systemd/system, enabled for multi-user.target).
# adare-sysinit runs what busybox's sysinit does that systemd does not (the static
# network, the fw_cfg hand-off); the agent follows it, restarted whenever it exits.
_SYSINIT_UNIT = """\
[Unit]
Description=adare: static network and the host's fw_cfg hand-off
After=systemd-udev-trigger.service local-fs.target
Before=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/adare/init/sysinit.sh

[Install]
WantedBy=multi-user.target
"""
_AGENT_UNIT = """\
[Unit]
Description=adare guest agent (WebSocket and serial link)
Requires=adare-sysinit.service
After=adare-sysinit.service

[Service]
ExecStart=/adare/init/agent-service.sh
Restart=always
RestartSec=0
# The agent's own children (a test's background programs) end with it.
KillMode=control-group

[Install]
WantedBy=multi-user.target
"""
LIGHTDM_ROOT_AUTHORITY = "/var/run/lightdm/root/:0"
"""The X cookie LightDM writes for its X server on :0 (root's; the agent's GUI tools)."""
# Debian's qemu-guest-agent.service binds to its port's device but is wanted by nothing.
_QGA_DEVICE = r"dev-virtio\x2dports-org.qemu.guest_agent.0.device"


def systemd_units() -> dict[str, str]:
    """The adare units of a systemd image: name -> text."""
    return {"adare-sysinit.service": _SYSINIT_UNIT, "adare-agent.service": _AGENT_UNIT}


def _install_systemd_layout(recipe: Recipe, rootfs: Path, overlay: Path) -> None:
    """The adare units (enabled), qemu-ga pulled in by its port, an ordinary fstab, the
    persistent journal's directory; on a desktop, :func:`_install_xfce_layout`."""
    system = overlay / "etc/systemd/system"
    wants = system / "multi-user.target.wants"
    wants.mkdir(parents=True)
    for name, text in systemd_units().items():
        (system / name).write_text(text)
        (wants / name).symlink_to(f"/etc/systemd/system/{name}")
    qga = system / f"{_QGA_DEVICE}.wants"
    qga.mkdir()
    (qga / "qemu-guest-agent.service").symlink_to("/lib/systemd/system/qemu-guest-agent.service")
    (overlay / "etc/fstab").write_text("/dev/vda / ext4 errors=remount-ro 0 1\n")
    # journald keeps the journal on disk when this exists (systemd-tmpfiles sets its
    # group and mode at boot).
    (overlay / "var/log/journal").mkdir(parents=True)
    if recipe.desktop:
        _install_xfce_layout(recipe, rootfs, overlay)


# Where debian-xfce's files go (recipe file -> path in the image); xfconf's defaults for
# every user are its channels in _XFCONF.
_XFCONF = "etc/xdg/xfce4/xfconf/xfce-perchannel-xml"
_XFCE_PLACES = {
    "xfce-lightdm.conf": "etc/lightdm/lightdm.conf.d/50-adare.conf",
    "xfce-keyboards.xml": f"{_XFCONF}/keyboards.xml",
    "xfce-xfwm4.xml": f"{_XFCONF}/xfwm4.xml",
    "xfce-terminal.desktop": "etc/xdg/autostart/adare-terminal.desktop",
}
_PANEL_DEFAULT = "etc/xdg/xfce4/panel/default.xml"


def _install_xfce_layout(recipe: Recipe, rootfs: Path, overlay: Path) -> None:
    """LightDM as the display manager (autologin, the adare hooks), XFCE's defaults for
    every user, and the panel's default layout taken as the user's (else its first start
    asks, in a dialog, which layout to use)."""
    for name, place in _XFCE_PLACES.items():
        target = overlay / place
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(recipe.script(name))
    # What an installer writes: the system locale PAM's pam_env reads for each session.
    (overlay / "etc/default").mkdir(parents=True, exist_ok=True)
    (overlay / "etc/default/locale").write_text("LANG=C.UTF-8\n")
    (overlay / "etc/systemd/system/display-manager.service").symlink_to(
        "/lib/systemd/system/lightdm.service"
    )
    # The root's file, not a symlink that could lead out of it: lstat says what it is.
    panel = rootfs / _PANEL_DEFAULT
    if panel.is_symlink() or not panel.is_file():
        raise ImageError(f"xfce4-panel's /{_PANEL_DEFAULT} is missing from the image")
    shutil.copyfile(panel, overlay / _XFCONF / "xfce4-panel.xml")


def _agent_env(recipe: Recipe, serial_device: str) -> str:
    env = {
        "ADARE_SERIAL": serial_device,
        "ADARE_PYTHON_FLAGS": recipe.python_flags,
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:/adare/bin",
        "HOME": "/root",
    }
    if recipe.user is not None:
        env["ADARE_USER"] = recipe.user
    if recipe.desktop:
        assert recipe.display is not None
        env["DISPLAY"] = ":0"
        env["ADARE_DISPLAY"] = f"{recipe.display[0]}x{recipe.display[1]}"
        if recipe.init == "systemd":  # LightDM's X server asks for its cookie
            env["XAUTHORITY"] = LIGHTDM_ROOT_AUTHORITY
    return "".join(f"export {key}='{value}'\n" for key, value in env.items())


def install_adare_layout(
    recipe: Recipe, rootfs: Path, overlay: Path, bundle: Path, serial_device: str
) -> None:
    """Write the init, the service scripts and the baked agent for ``rootfs`` into
    ``overlay`` (merged into it by :func:`merge_overlay`)."""
    init_dir = overlay / "adare/init"
    init_dir.mkdir(parents=True)
    (overlay / "adare/agent").mkdir()
    (overlay / "adare/run").mkdir()
    for name in recipe.scripts:
        if not name.endswith(".sh"):  # a configuration file, placed by its layout
            continue
        # A flavour's variant of a hook (sysinit-extra-desktop.sh) installs as the hook.
        script = init_dir / name.replace("-desktop", "")
        script.write_bytes(recipe.script(name))
        script.chmod(0o755)
    (init_dir / "agent.env").write_text(_agent_env(recipe, serial_device))
    shutil.copyfile(bundle, overlay / "adare/agent/bundle.pyz")
    (overlay / "etc").mkdir()
    (overlay / "etc/hostname").write_text(f"adare-{recipe.name}\n")
    (overlay / "etc/resolv.conf").symlink_to("/run/resolv.conf")  # replaces the file
    _install_busybox_applets(rootfs, overlay)
    if recipe.init == "systemd":
        _install_systemd_layout(recipe, rootfs, overlay)
        return
    (overlay / "etc/inittab").write_text(inittab(recipe))
    sbin = overlay / "sbin"
    sbin.mkdir()
    # lexists: the root's symlinks are absolute, they must not resolve on the host.
    for name in ("init", *_BUSYBOX_POWER):
        if not os.path.lexists(rootfs / "sbin" / name):
            (sbin / name).symlink_to("/bin/busybox")
    if not os.path.lexists(rootfs / "sbin/shutdown"):
        shutil.copyfile(init_dir / "shutdown.sh", sbin / "shutdown")
        (sbin / "shutdown").chmod(0o755)


def merge_overlay(overlay: Path, rootfs: Path, log: Path, privilege: BuildPrivilege) -> None:
    """Copy ``overlay`` into ``rootfs`` as root: root owns every file, existing
    directories keep their modes and ``/sbin`` / ``/lib`` stay the merged-usr symlinks."""
    script = (
        'tar -C "$1" --owner=0 --group=0 --numeric-owner -c . '
        '| tar -C "$2" -x --keep-directory-symlink --no-overwrite-dir'
    )
    argv = ["sh", "-c", script, "sh", str(overlay), str(rootfs)]
    run_logged(privilege.wrap(argv), log, "copying the adare layout in", timeout=300)


def _install_busybox_applets(rootfs: Path, overlay: Path) -> None:
    """Link busybox's applets into ``/adare/bin``, last on PATH (Debian's tools win)."""
    listing = subprocess.run(
        [str(rootfs / "bin/busybox"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    bin_dir = overlay / "adare/bin"
    bin_dir.mkdir()
    for applet in listing:
        (bin_dir / applet).symlink_to("/bin/busybox")
    profile = overlay / "etc/profile.d/adare.sh"
    profile.parent.mkdir(exist_ok=True)
    profile.write_text('PATH="$PATH:/adare/bin"\n')


def take_kernel(recipe: Recipe, kernel_dir: Path, overlay: Path, out_dir: Path) -> Path:
    """Copy ``vmlinuz`` to ``out_dir`` and the recipe's module subtrees and single
    modules into ``overlay`` (``overlay/lib/modules``: they need :func:`depmod` once
    merged); returns the full modules directory (for the initrd)."""
    version = kernel_version(kernel_dir)
    shutil.copyfile(kernel_dir / f"boot/vmlinuz-{version}", out_dir / "vmlinuz")
    modules = kernel_dir / "modules" / version
    wanted = _rootfs_module_names(recipe, modules)
    if wanted:
        _keep_modules(modules, wanted, overlay / "lib/modules" / version)
    return modules


def _rootfs_module_names(recipe: Recipe, modules: Path) -> list[str]:
    """The recipe's single modules and every module in its subtrees."""
    in_subtrees = [
        path.name.split(".ko", 1)[0]
        for subtree in recipe.rootfs_module_dirs
        for path in (modules / subtree).rglob("*.ko*")
    ]
    return [*in_subtrees, *recipe.rootfs_modules]


def _keep_modules(modules: Path, wanted: list[str], target: Path) -> None:
    for relative in module_load_order(modules, wanted):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(modules / relative, target / relative)
    for meta in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (modules / meta).exists():
            shutil.copyfile(modules / meta, target / meta)


def depmod(rootfs: Path, modules: Path, log: Path, privilege: BuildPrivilege) -> None:
    """``depmod`` for the kernel whose modules (``modules``) the root file system keeps."""
    argv = ["chroot", str(rootfs), "depmod", modules.name]
    run_logged(privilege.wrap(argv), log, "depmod", timeout=300)


def strip_rootfs(rootfs: Path, log: Path, privilege: BuildPrivilege) -> None:
    """Drop what the booted guest never reads (leftover apt lists and caches) and what a
    recipe's steps left in ``/tmp``."""
    leftovers = ("var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "boot", "tmp")
    present = [str(rootfs / name) for name in leftovers if (rootfs / name).is_dir()]
    if present:
        argv = ["find", *present, "-mindepth", "1", "-delete"]
        run_logged(privilege.wrap(argv), log, "stripping the root file system", timeout=300)


def tree_size(rootfs: Path, privilege: BuildPrivilege) -> int:
    """The bytes in ``rootfs``'s regular files (read as its root: some are private), on
    its own file system only (``mkfs.ext4 -d`` gets nothing else).

    :raise ImageError: ``find`` failed (with what it said).
    """
    argv = ["find", str(rootfs), "-xdev", "-type", "f", "-printf", "%s\n"]
    done = subprocess.run(
        privilege.wrap(argv), capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        said = format_tail(done.stderr.splitlines()[-10:], "find's last lines")
        raise ImageError(f"cannot size the root file system {rootfs}\n{said}")
    return sum(int(size) for size in done.stdout.split())


def remove_tree(tree: Path, privilege: BuildPrivilege) -> None:
    """Delete ``tree`` (as the build's root: the user may not own what is in it), never
    crossing into another file system (what a killed mmdebstrap left mounted in it)."""
    if tree.exists():
        argv = ["rm", "-rf", "--one-file-system", str(tree)]
        subprocess.run(privilege.wrap(argv), check=False, timeout=300)
