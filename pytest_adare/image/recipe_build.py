"""A user's recipe → a cached image: where it is built, how, and when it is reused.

A chain of recipes is read down to its root (a built-in image or a disk) and its steps
are concatenated. On a built-in root the packages, files and provision steps go in
when the root file system is made (``build_image``: no boot). On any other root the
build boots it and runs the steps through the agent; that needs the VM layer, so the
caller hands in a :class:`BootedBuilder` (``image_provision.build_on_disk``).

Both are cached under ``images/<name>-<hash>``, the hash covering the root's identity
(its recipe hash or disk sha256), every step and every copied file's content, and
built under the same lock as the built-in images into a directory renamed into place
when complete: a failed build leaves the cache as it was.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from pytest_adare.errors import ImageError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.build import build_image, readable_by_all
from pytest_adare.image.build_claim import PARTIAL_MARK, Claim, partial_prefix, reap
from pytest_adare.image.cache import build_lock, cached_image, image_dir, images_root
from pytest_adare.image.manifest import MANIFEST_NAME, ImageManifest
from pytest_adare.image.recipe import DEFAULT_MIRROR, Recipe, builtin_recipe
from pytest_adare.image.recipe_file import ImageRecipe, is_recipe, load_recipe

Progress = Callable[[str], None]
MAX_CHAIN = 16


class BootedBuilder(Protocol):
    """Builds ``recipe`` over ``base`` by booting it; writes the image into ``out``
    (an empty directory) and returns its manifest path."""

    def __call__(
        self,
        base: ImageManifest,
        recipe: ImageRecipe,
        out: Path,
        *,
        flatten: bool,
        progress: Progress,
    ) -> Path: ...


@dataclass(frozen=True)
class BuildRequest:
    """How to build: rebuild even when cached, flatten a layered image, the mirror."""

    force: bool = False
    flatten: bool = False
    mirror: str = DEFAULT_MIRROR


def flattened(recipe: ImageRecipe) -> ImageRecipe:
    """``recipe`` with the steps of the recipes under it first, its base the chain's root.

    :raise ImageError: the chain loops or is deeper than ``MAX_CHAIN``.
    """
    chain = [recipe]
    while is_recipe(chain[-1].base):
        if len(chain) >= MAX_CHAIN:
            raise ImageError(f"recipe {recipe.path}: more than {MAX_CHAIN} recipes deep")
        below = load_recipe(chain[-1].base)
        if any(below.path == seen.path for seen in chain):
            raise ImageError(f"recipe {recipe.path}: its bases loop back to {below.path}")
        chain.append(below)
    steps = list(reversed(chain))
    return replace(
        recipe,
        base=steps[0].base,
        install=tuple(dict.fromkeys(p for r in steps for p in r.install)),
        provision=tuple(step for r in steps for step in r.provision),
        files=tuple(copy for r in steps for copy in r.files),
        services=tuple(dict.fromkeys(unit for r in steps for unit in r.services)),
    )


def extended_recipe(recipe: ImageRecipe) -> Recipe:
    """The built-in recipe of ``recipe``'s base with its steps added (built in one go)."""
    base = builtin_recipe(recipe.base)
    if recipe.services and base.init != "systemd":
        raise ImageError(
            f"recipe {recipe.path}: 'services' needs a systemd base (debian-systemd, "
            f"debian-xfce); {recipe.base} boots {base.init} init"
        )
    extra = tuple(p for p in recipe.install if p not in base.packages)
    return replace(
        base,
        name=recipe.name,
        packages=base.packages + extra,
        provision=recipe.provision,
        files=recipe.files,
        services=recipe.services,
    )


def base_identity(base: ImageManifest) -> str:
    """The base disk's sha256 (the manifest's, else read from the disk)."""
    return base.disk_sha256 or file_sha256(base.disk)


def recipe_image(
    recipe: ImageRecipe,
    *,
    resolve_base: Callable[[str], ImageManifest],
    booted: BootedBuilder | None,
    request: BuildRequest | None = None,
    progress: Progress | None = None,
) -> Path:
    """The manifest of ``recipe``'s image, built first unless the cache holds it.

    ``resolve_base`` turns a non-built-in base into a manifest (``resolve_image``).

    :raise ImageError: bad input or a failed build (the cache is left as it was), or
        a base that must be booted and no ``booted`` builder.
    """
    say = progress or (lambda line: None)
    request = request or BuildRequest()
    recipe = flattened(recipe)
    where = recipe.path or recipe.name
    if recipe.builtin_base is not None:
        built_in = extended_recipe(recipe)
        target = image_dir(built_in)
        if (target / MANIFEST_NAME).is_file() and not request.force:
            say(f"image {recipe.name} ({where}) is cached at {target}; not rebuilt")
            return target / MANIFEST_NAME
        if request.force:
            with build_lock(target, f"building {recipe.name}"):
                return build_image(built_in, target, mirror=request.mirror, progress=say)
        return cached_image(built_in, mirror=request.mirror, progress=say)
    base = resolve_base(recipe.base)
    target = images_root() / f"{recipe.name}-{recipe.image_hash(base_identity(base))}"
    manifest = target / MANIFEST_NAME
    if manifest.is_file() and not request.force:
        say(f"image {recipe.name} ({where}) is cached at {target}; not rebuilt")
        return manifest
    if booted is None:
        raise ImageError(
            f"recipe {where}: its base {recipe.base} is not a built-in image, so building it "
            "boots the base; this entry point cannot boot a VM (use adare-image build)"
        )
    lock = build_lock(target, f"building {recipe.name}")
    say(f"image {recipe.name} is not cached at {target}; building it over {base.disk}")
    with lock:
        if manifest.is_file() and not request.force:
            return manifest
        return _build_into(target, lambda stage: booted(
            base, recipe, stage, flatten=request.flatten, progress=say
        ))  # fmt: skip


def _build_into(target: Path, build: Callable[[Path], Path]) -> Path:
    """Build into a fresh sibling directory, renamed over ``target`` only when complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    reap(target.parent, ".", lambda path: shutil.rmtree(path, ignore_errors=True),
         contains=PARTIAL_MARK)  # fmt: skip
    claim = Claim(target.parent, partial_prefix(target))
    stage = claim.path
    stage.chmod(0o755)
    try:
        build(stage)
        readable_by_all(stage)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            stage.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            stage.rename(target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        claim.release()
    return target / MANIFEST_NAME
