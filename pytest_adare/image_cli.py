"""``adare-image``: build the built-in Debian images and recipes, check that an image boots.

    adare-image build debian[:SUITE] [--desktop] [--out DIR] [--suite bookworm] [--mirror URL]
    adare-image build debian-desktop[:SUITE] [--out DIR]
    adare-image build debian-systemd[:SUITE] [--out DIR]     (systemd as PID 1)
    adare-image build debian-xfce[:SUITE] [--out DIR]        (systemd, LightDM, XFCE)
    adare-image build RECIPE.toml[@SUITE] [--force] [--flatten]   (no @SUITE: each of its suites)
    adare-image build debian [--desktop] --install PKG,PKG [--provision COMMAND] [--name N]
    adare-image check PATH [--accel auto|tcg|kvm] [--timeout SECONDS]

``build`` prints one line per phase and the manifest path last; without
``--out`` the image goes to (or is reused from) the user cache, and a recipe's image
always does (docs/images.md "Recipes"). ``check``
boots the image, waits for QGA and the agent, prints each phase's time and
exits non-zero with the console tail when something fails. A user's image (no
boot-time hand-off: a bare disk, or a manifest without ``agent.fw_cfg`` /
``agent.initrd_handoff``) boots exactly as the plugin boots it; the last line names
the firmware and the channel that delivered the agent (``qga`` or ``cloud-init``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pytest_adare.errors import AdareError, ImageError
from pytest_adare.image.build import build_image
from pytest_adare.image.cache import cached_image, image_dir
from pytest_adare.image.manifest import BUILTIN_IMAGES, ImageManifest
from pytest_adare.image.recipe import DEFAULT_MIRROR, DEFAULT_SUITE, builtin_recipe
from pytest_adare.image.recipe_build import BuildRequest, recipe_image
from pytest_adare.image.recipe_file import (
    ImageRecipe,
    check_packages,
    is_recipe,
    load_recipe,
    recipe_variants,
)
from pytest_adare.image.resolve import resolve_image
from pytest_adare.image.suites import check_suite, split_suite
from pytest_adare.vm_options import VMOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adare-image", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build a built-in image or a recipe")
    build.add_argument(
        "name",
        help="debian, debian-desktop, debian-systemd or debian-xfce (the built-in images, each "
        "optionally :SUITE, e.g. debian:bullseye), or a recipe file (.toml)",
    )
    build.add_argument(
        "--desktop",
        action="store_true",
        help="the desktop of the image named: debian gives debian-desktop (X, a window "
        "manager, a terminal), debian-systemd gives debian-xfce (LightDM and XFCE)",
    )
    build.add_argument("--out", type=Path, help="output directory (default: the user cache)")
    build.add_argument("--suite", default=DEFAULT_SUITE, help="Debian suite (default %(default)s)")
    build.add_argument("--mirror", default=DEFAULT_MIRROR, help="Debian mirror URL")
    build.add_argument(
        "--force", action="store_true", help="rebuild even when the cache already holds the image"
    )
    build.add_argument(
        "--install",
        action="append",
        default=[],
        metavar="PKG,PKG",
        help="a built-in image only: the one-line recipe's packages (comma-separated, repeatable)",
    )
    build.add_argument(
        "--provision",
        action="append",
        default=[],
        metavar="COMMAND",
        help="a built-in image only: a shell command run as root after the packages (repeatable)",
    )
    build.add_argument(
        "--name",
        dest="image_name",
        help="the one-line recipe's image name (default: NAME-custom)",
    )
    build.add_argument(
        "--flatten",
        action="store_true",
        help="a recipe over a disk that is not built in: one standalone disk, not a layer",
    )
    check = commands.add_parser("check", help="boot an image and wait for QGA and the agent")
    check.add_argument("path", help="manifest, image directory, disk, or built-in name")
    check.add_argument("--accel", default="auto", choices=["auto", "tcg", "kvm"])
    check.add_argument(
        "--handoff",
        default="auto",
        choices=["auto", "initrd", "fw_cfg"],
        help="how the per-VM config and agent reach a built-in image",
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for each phase (default %(default)s)",
    )
    return parser


def _say(line: str) -> None:
    print(line, flush=True)


def _one_line_recipe(args: argparse.Namespace) -> ImageRecipe | None:
    """``build debian [--desktop] --install A,B --provision CMD`` as a recipe (None: plain)."""
    packages = [p.strip() for group in args.install for p in group.split(",") if p.strip()]
    if not (packages or args.provision):
        if args.image_name:
            raise ImageError("--name names a one-line recipe: give --install or --provision")
        return None
    base = args.name + (f":{args.suite}" if args.suite != DEFAULT_SUITE else "")
    return ImageRecipe(
        name=args.image_name or f"{base}-custom",
        base=base,
        install=check_packages(packages, "given on the command line"),
        provision=tuple(args.provision),
    )


def _build_recipe(args: argparse.Namespace, recipe: ImageRecipe | Path) -> int:
    # Deferred: a recipe over a user's disk boots it (the whole VM layer).
    from pytest_adare.image_provision import build_on_disk

    if args.out is not None or (isinstance(recipe, Path) and args.suite != DEFAULT_SUITE):
        raise ImageError(
            "--out and --suite are for the built-in image; a recipe is cached (its base "
            'names the suite: base = "debian:bullseye")'
        )
    loaded = load_recipe(recipe) if isinstance(recipe, Path) else recipe
    manifest = recipe_image(
        loaded,
        resolve_base=lambda base: resolve_image(base, _say),
        booted=build_on_disk,
        request=BuildRequest(force=args.force, flatten=args.flatten, mirror=args.mirror),
        progress=_say,
    )
    print(manifest, flush=True)
    return 0


def _builtin(args: argparse.Namespace) -> tuple[str, str]:
    """``(name, suite)`` of the built-in name given (``debian``, ``debian-desktop``,
    ``debian-systemd``, ``debian-xfce``, each optionally ``:SUITE``), the way ``--adare-vm``
    spells it, with ``--desktop`` and ``--suite`` applied.

    :raise ImageError: another name, two different suites, or ``--desktop`` on a name
        that has no desktop.
    """
    named = split_suite(args.name)
    name, suite = named if named is not None else (args.name, args.suite)
    if name not in BUILTIN_IMAGES:
        raise ImageError(
            f"cannot build {args.name!r}: give a built-in image ({', '.join(BUILTIN_IMAGES)}, "
            "each optionally :SUITE, e.g. debian:bullseye) or a recipe (.toml)"
        )
    if named is not None and args.suite not in (DEFAULT_SUITE, suite):
        raise ImageError(
            f"{args.name!r} names suite {suite!r} and --suite {args.suite!r}: give one"
        )
    if args.desktop:
        desktops = {"debian": "debian-desktop", "debian-systemd": "debian-xfce"}
        if name not in desktops and name not in desktops.values():
            raise ImageError(
                f"--desktop: {name} has no desktop (the desktop images are debian-desktop "
                "and, on systemd, debian-xfce)"
            )
        name = desktops.get(name, name)
    return name, suite


def _build(args: argparse.Namespace) -> int:
    if is_recipe(args.name):
        # A recipe of several suites builds each (one image, one manifest line apiece).
        for spec in recipe_variants(args.name) or (args.name,):
            _build_recipe(args, Path(spec))
        return 0
    args.name, args.suite = _builtin(args)
    if (one_line := _one_line_recipe(args)) is not None:
        return _build_recipe(args, one_line)
    recipe = builtin_recipe(f"{args.name}:{args.suite}")
    if args.out is not None:
        check_suite(recipe.suite, args.mirror)
        manifest = build_image(recipe, args.out, mirror=args.mirror, progress=_say)
    elif args.force:
        check_suite(recipe.suite, args.mirror)
        manifest = build_image(recipe, image_dir(recipe), mirror=args.mirror, progress=_say)
    else:
        manifest = cached_image(recipe, mirror=args.mirror, progress=_say)
    print(manifest, flush=True)
    return 0


def _check(args: argparse.Namespace) -> int:
    # Deferred: the check boots QEMU (qemu.qmp, websockets, PIL); `build` needs none of it.
    from pytest_adare.agent.install import uses_boot_handoff
    from pytest_adare.image_check import check_image
    from pytest_adare.image_provision import build_on_disk

    manifest = resolve_image(args.path, progress=_say, booted=build_on_disk)
    if not uses_boot_handoff(manifest):
        return _check_own_image(args, manifest)
    report = check_image(
        args.path, accel=args.accel, timeout=args.timeout, progress=_say, handoff=args.handoff
    )
    return 0 if report.ok else 1


def _check_own_image(args: argparse.Namespace, manifest: ImageManifest) -> int:
    """A user's image (no boot-time hand-off): boot it as the plugin would and say which
    firmware booted it and which channel delivered the agent."""
    # Deferred: booting a VM needs the whole VM layer; `build` needs none of it.
    from pytest_adare.vm import VM

    _say(f"checking {manifest.path or manifest.disk} ({manifest.format}; the agent is "
         "delivered at run time)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="adare-check-") as tmp:
        vm = VM(manifest, Path(tmp), VMOptions(accel=args.accel, boot_timeout=args.timeout))
        try:
            vm.start(progress=_say)
        except AdareError as exc:
            _say(f"FAILED: {exc}")
            return 1
        finally:
            vm.close()
    channel = next(p.name for p in vm.phases if p.name in ("qga", "cloud-init"))
    _say(f"ok: {vm.firmware_reason}; agent delivered by {channel}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``adare-image`` console script."""
    args = _parser().parse_args(argv)
    try:
        return _build(args) if args.command == "build" else _check(args)
    except AdareError as exc:
        print(f"adare-image: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("adare-image: interrupted", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
