"""What goes into the built-in Debian images, and the hash that names a build.

The recipe hash covers everything that changes the image's contents (suite,
packages, kernel modules, boot arguments, the init scripts in this directory,
:data:`BUILDER_VERSION`) and deliberately not the agent code: a newer agent is
handed to the guest at boot through fw_cfg, so an agent change needs no rebuild.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from importlib import resources

from pytest_adare.errors import ImageError
from pytest_adare.image.recipe_file import FileCopy
from pytest_adare.image.suites import DEFAULT_SUITE as DEFAULT_SUITE  # re-exported
from pytest_adare.image.suites import split_suite

BUILDER_VERSION = 2
"""2: apt and its sources list, the init kept by an apt pin, the desktop user."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# usr-is-merged: else apt satisfies init-system-helpers with usrmerge, which drags in perl.
_CONSOLE_PACKAGES = (
    "python3",
    # apt, so a recipe or a test can install more (mmdebstrap keeps the sources list).
    "apt",
    "python3-pip",  # install_dependencies (pip install --target RUN_DIR/site-packages)
    "qemu-guest-agent",
    "iproute2",
    "kmod",
    "busybox-static",
    "wget",  # Debian's: busybox's applet segfaults on -T (it stays, shadowed on PATH)
    "usr-is-merged",
)
_DESKTOP_PACKAGES = (
    "udev",
    "xserver-xorg-core",
    "xserver-xorg-input-libinput",
    "openbox",
    "xterm",
    "x11-xserver-utils",
    "python3-xlib",
    "python3-pil",
    # Tk for the demo dialog GUI tests click (demo-dialog.sh); DejaVu fonts so Tk and
    # openbox draw glyphs the host's OCR reads well.
    "python3-tk",
    "fonts-dejavu-core",
    # The session bus of the desktop user (dbus-daemon); it also stands for every
    # package's "dbus-user-session | dbus-x11", so none pulls in systemd's user session.
    "dbus-x11",
    "dbus-daemon",
)
# A real install's init (debian-systemd): systemd as PID 1 with journald, logind and udev,
# the system bus, and PAM sessions registered with logind.
_SYSTEMD_PACKAGES = ("systemd-sysv", "udev", "dbus", "libpam-systemd")
# A desktop as an installer leaves it (debian-xfce): LightDM logging the user into XFCE,
# its file manager, editor, image viewer and terminal, the session bus of systemd --user,
# gvfs for Thunar's trash, the user's XDG directories. The rest as debian-desktop's: what
# the agent's GUI tools and the demo dialog use, DejaVu for OCR.
_XFCE_PACKAGES = (
    "xserver-xorg-core",
    "xserver-xorg-input-libinput",
    "x11-xserver-utils",
    "lightdm",
    "lightdm-gtk-greeter",
    "xfwm4",
    "xfdesktop4",
    "xfce4-panel",
    "xfce4-session",
    "xfce4-settings",
    "xfconf",
    "thunar",
    "mousepad",
    "ristretto",
    "xfce4-terminal",
    "xdg-user-dirs",
    "gvfs",
    "dbus-user-session",
    "adwaita-icon-theme",
    "python3-xlib",
    "python3-pil",
    "python3-tk",
    "fonts-dejavu-core",
)
INITS = ("busybox", "systemd")
"""``Recipe.init``: busybox ``init`` and the adare scripts (fast), or systemd and units."""
# nft, so a test can firewall the agent's port for real (issue 5's diagnosis). Its kernel
# modules load on demand (the kernel runs modprobe when nft opens its netlink socket),
# never at boot: nothing in the console image uses netfilter until a test does.
_FIREWALL_PACKAGES = ("nftables",)
_FIREWALL_MODULES = ("nf_tables",)
# A writable share's file system (virtiofs, and fuse under it): the share phase loads it
# when it mounts one, never at boot.
_SHARE_MODULES = ("virtiofs",)
# Loaded by the initrd (those built into the kernel are skipped).
_INITRD_MODULES = (
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    # The virtio RNG (rng=True): no udev loads it in these images; without the device it
    # only registers its driver.
    "virtio_rng",
    "qemu_fw_cfg",
    "ext4",
    "crc32c_generic",
)
# The desktop's display (bochs DRM on the std VGA) and input (USB tablet, PS/2, virtio).
_DESKTOP_MODULE_DIRS = (
    "kernel/drivers/gpu/drm",
    "kernel/drivers/input",
    "kernel/drivers/hid",
    "kernel/drivers/usb/host",
    "kernel/drivers/usb/core",
    "kernel/drivers/virtio",
    "kernel/drivers/char",
)


@dataclass(frozen=True)
class Recipe:
    """One built-in image: its packages, kernel, boot arguments and init scripts."""

    name: str
    suite: str
    packages: tuple[str, ...]
    kernel_package: str
    initrd_modules: tuple[str, ...]
    rootfs_module_dirs: tuple[str, ...]
    """Module subtrees (and their dependencies) kept in the root disk for udev to load."""
    append: str
    desktop: bool
    display: tuple[int, int] | None
    memory_mib: int
    python_flags: str
    """Flags for the agent's ``python3``: ``-S`` skips site-packages (faster start)."""
    scripts: tuple[str, ...]
    inittab_extra: tuple[str, ...]
    dpkg_excludes: tuple[str, ...] = ()
    """Extra files dpkg never unpacks (dpkg ``path-exclude`` globs)."""
    rootfs_modules: tuple[str, ...] = ()
    """Single modules (and their dependencies) kept in the root disk for ``modprobe`` to
    load on demand: the kernel asks for them by alias when something first uses them."""
    user: str | None = None
    """The desktop session's user (uid 1000), made with its home and XDG directories."""
    provision: tuple[str, ...] = ()
    """A recipe's shell commands, run as root in the finished root file system."""
    files: tuple[FileCopy, ...] = ()
    """A recipe's host files, copied in before the provision commands run."""
    ready_command: str | None = None
    """The manifest's ``ready_command``: exits 0 once the image's own start-up is done."""
    init: str = "busybox"
    """PID 1: ``busybox`` (an inittab runs the adare scripts) or ``systemd`` (they run as
    units beside the distribution's own; see :data:`INITS`)."""
    services: tuple[str, ...] = ()
    """A recipe's systemd units, enabled once its provision commands ran (systemd only)."""

    def script(self, name: str) -> bytes:
        """The bytes of one recipe file in this package."""
        return resources.files(__name__).joinpath(name).read_bytes()

    def recipe_hash(self) -> str:
        """A short sha256 of every input that changes the built image."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self._hashed_fields(), sort_keys=True).encode())
        for name in sorted({*self.scripts, "initrd-init.sh"}):
            digest.update(name.encode() + b"\0" + self.script(name))
        return digest.hexdigest()[:16]

    def _hashed_fields(self) -> dict[str, object]:
        """The fields, but optional ones only when set: adding an optional field to
        :class:`Recipe` then changes the hash (and rebuilds) only images that use it."""
        values = asdict(self)
        for spec in fields(self):
            if spec.default is not MISSING and values[spec.name] == spec.default:
                del values[spec.name]
        if "files" in values:  # their content and destination, not the host's path
            values["files"] = [copy.hashed() for copy in self.files]
        values["builder_version"] = BUILDER_VERSION
        return values


_COMMON_SCRIPTS = ("lib.sh", "sysinit.sh", "agent-service.sh", "qga-service.sh", "shutdown.sh")
# systemd runs qemu-ga from Debian's own unit and has its own shutdown.
_SYSTEMD_SCRIPTS = ("lib.sh", "sysinit.sh", "agent-service.sh")
# debian-xfce's LightDM hooks, its XFCE defaults and the autostarted terminal (installed
# by rootfs.install_adare_layout; listed here so the recipe hash covers them).
_XFCE_FILES = (
    "desktop-user.sh",
    "demo-dialog.sh",
    "xfce-display.sh",
    "xfce-session.sh",
    "xfce-terminal.sh",
    "xfce-lightdm.conf",
    "xfce-keyboards.xml",
    "xfce-xfwm4.xml",
    "xfce-terminal.desktop",
)
# What an older suite calls a package (None: it has none and needs none). Bullseye
# predates usr-is-merged (its init-system-helpers does not pull in usrmerge) and the
# split of dbus-daemon out of dbus.
_SUITE_PACKAGES: dict[str, dict[str, str | None]] = {
    "bullseye": {"usr-is-merged": None, "dbus-daemon": "dbus"},
}


def _packages(packages: tuple[str, ...], suite: str) -> tuple[str, ...]:
    renamed = _SUITE_PACKAGES.get(suite, {})
    chosen = (renamed.get(name, name) for name in packages)
    return tuple(name for name in chosen if name is not None)


# debian-xfce is ready once systemd has started everything and the session is up: its
# desktop drawn and the autostarted terminal running (autostart entries come last). It
# replaces the systemd wait, so it includes it.
DESKTOP_USER = "user"
"""The built-in desktops' user (uid 1000; xfce-lightdm.conf logs it in)."""
XFCE_READY = (
    f"systemctl is-system-running --quiet && pgrep -u {DESKTOP_USER} -x xfdesktop >/dev/null "
    f"&& pgrep -u {DESKTOP_USER} -x xfce4-terminal >/dev/null"
)

# The built-in names and what each is: (desktop, init).
_FLAVOURS = {
    "debian": (False, "busybox"),
    "debian-desktop": (True, "busybox"),
    "debian-systemd": (False, "systemd"),
    "debian-xfce": (True, "systemd"),
}


def builtin_name(desktop: bool, suite: str, init: str = "busybox") -> str:
    """The image's name: ``debian``/``debian-desktop``/``debian-systemd``, with
    ``-bullseye`` for another suite than the default (the default's image is plain
    ``debian``'s, one cache entry).

    >>> builtin_name(False, DEFAULT_SUITE), builtin_name(True, "bullseye")
    ('debian', 'debian-desktop-bullseye')
    >>> builtin_name(False, DEFAULT_SUITE, "systemd")
    'debian-systemd'
    """
    name = next(key for key, value in _FLAVOURS.items() if value == (desktop, init))
    return name if suite == DEFAULT_SUITE else f"{name}-{suite}"


def builtin_recipe(spec: str) -> Recipe:
    """The recipe of a built-in name, plain (``debian``) or with a suite (``debian:trixie``).

    :raise ImageError: not a built-in name, or a malformed suite.
    """
    named = split_suite(spec)
    name, suite = named if named is not None else (spec, DEFAULT_SUITE)
    if name not in _FLAVOURS:
        raise ImageError(
            f"no built-in image named {spec!r} (known: {', '.join(_FLAVOURS)}, each "
            "optionally with a Debian suite: debian:bullseye)"
        )
    desktop, init = _FLAVOURS[name]
    return debian_recipe(desktop=desktop, suite=suite, init=init)


def debian_recipe(
    desktop: bool = False, suite: str = DEFAULT_SUITE, init: str = "busybox"
) -> Recipe:
    """The built-in ``debian`` (console), ``debian-desktop`` or ``debian-systemd`` (console,
    systemd as PID 1) recipe of Debian ``suite``."""
    if init not in INITS:
        raise ImageError(f"init {init!r} is not one of {', '.join(INITS)}")
    if not desktop:
        console = Recipe(
            name=builtin_name(False, suite),
            suite=suite,
            packages=_packages(_CONSOLE_PACKAGES + _FIREWALL_PACKAGES, suite),
            kernel_package="linux-image-cloud-amd64",
            initrd_modules=_INITRD_MODULES,
            rootfs_module_dirs=(),
            append="console=ttyS0 quiet root=/dev/vda",
            desktop=False,
            display=None,
            memory_mib=256,
            python_flags="-S",
            scripts=_COMMON_SCRIPTS,
            inittab_extra=(),
            rootfs_modules=_FIREWALL_MODULES + _SHARE_MODULES,
        )
        if init == "busybox":
            return console
        # The console image with systemd as PID 1: its packages, units instead of the
        # busybox-only scripts, and eth0 keeping its name (udev would rename it; the
        # adare unit configures it).
        return replace(
            console,
            name=builtin_name(False, suite, init),
            packages=console.packages + _packages(_SYSTEMD_PACKAGES, suite),
            append=f"{console.append} net.ifnames=0",
            memory_mib=384,
            scripts=_SYSTEMD_SCRIPTS,
            init=init,
        )
    desktop_recipe = Recipe(
        name=builtin_name(True, suite),
        suite=suite,
        packages=_packages(_CONSOLE_PACKAGES + _DESKTOP_PACKAGES, suite),
        kernel_package="linux-image-amd64",
        initrd_modules=_INITRD_MODULES,
        rootfs_module_dirs=_DESKTOP_MODULE_DIRS,
        append="console=ttyS0 quiet root=/dev/vda",
        desktop=True,
        display=(1024, 768),
        memory_mib=768,
        python_flags="",
        scripts=(
            *_COMMON_SCRIPTS,
            "sysinit-extra-desktop.sh",
            "desktop-session.sh",
            "demo-dialog.sh",
            "desktop-user.sh",
        ),
        inittab_extra=("::respawn:/adare/init/desktop-session.sh",),
        user=DESKTOP_USER,
        rootfs_modules=_SHARE_MODULES,
        # Mesa's GL drivers and LLVM (GLX: unused), and what only imlib2's image loaders
        # dlopen (PostScript, HEIF/AV1 codecs): ~220 MB that no test reads.
        dpkg_excludes=tuple(
            f"/usr/lib/x86_64-linux-gnu/{name}"
            for name in ("dri/*", "libLLVM*", "libz3.so*", "libgs.so*", "libx265.so*", "libaom.so*")
        ),
    )
    if init == "busybox":
        return desktop_recipe
    # XFCE on systemd: the desktop's kernel, modules and screen, a real install's packages
    # and LightDM's autologin instead of the scripted session (udev is systemd's).
    return replace(
        desktop_recipe,
        name=builtin_name(True, suite, init),
        packages=_packages(_CONSOLE_PACKAGES + _SYSTEMD_PACKAGES + _XFCE_PACKAGES, suite),
        append=f"{desktop_recipe.append} net.ifnames=0",
        memory_mib=1024,
        scripts=_SYSTEMD_SCRIPTS + _XFCE_FILES,
        inittab_extra=(),
        init=init,
        ready_command=XFCE_READY,
    )
