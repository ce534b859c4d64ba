"""Built-in images cached under ``$XDG_CACHE_HOME/pytest-adare/images/<name>-<recipe hash>/``.

The first user builds; concurrent users (pytest-xdist workers, two terminals)
wait on an ``fcntl`` lock next to the image instead of building it twice. The
build happens in a temporary sibling directory renamed into place at the end,
so an image directory that exists is complete.

``ADARE_IMAGE_CACHE`` (or the ini key ``adare_image_cache``, which sets it) names a
directory several users or CI jobs share instead: images are published there
readable by all (lock files group-writable), and a user who may read but not
write it uses what is there and never tries to build into it. Only images are
shared: warm states, bundles and the accel verdict stay in each user's own cache.

An image is handed out only once :func:`cached_manifest` passed it: owned by someone
this user trusts, its files its own, its disk as built (``image.cache_trust``,
``image.disk_check``).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from pytest_adare.cache_dir import IMAGE_CACHE_ENV, cache_root, exclusive_lock
from pytest_adare.errors import ImageError
from pytest_adare.image.build import build_image
from pytest_adare.image.cache_trust import check_entry, check_files, check_shared_root, trust_rule
from pytest_adare.image.disk_check import check_disk
from pytest_adare.image.manifest import MANIFEST_NAME, ImageManifest, load_manifest
from pytest_adare.image.recipe import DEFAULT_MIRROR, DEFAULT_SUITE, Recipe, builtin_recipe
from pytest_adare.image.suites import check_suite

Progress = Callable[[str], None]
BUILD_LOCK_TIMEOUT = 1800.0
SHARED_LOCK_MODE = 0o664


def shared_image_cache() -> Path | None:
    """The shared image cache ``$ADARE_IMAGE_CACHE`` names, or None."""
    value = os.environ.get(IMAGE_CACHE_ENV, "").strip()
    return Path(value).expanduser().resolve() if value else None


def images_root() -> Path:
    """``$ADARE_IMAGE_CACHE``, else ``$XDG_CACHE_HOME/pytest-adare/images``."""
    return shared_image_cache() or cache_root() / "images"


def build_lock(
    target: Path, what: str, timeout: float = BUILD_LOCK_TIMEOUT
) -> AbstractContextManager[None]:
    """The lock that serialises building the image at ``target``.

    :raise ImageError: ``target`` is in a shared image cache this user may not write;
        the message says who can fill it and how to build into the user's own cache.
    """
    root = images_root()
    if root == shared_image_cache():
        if not os.access(root, os.W_OK | os.X_OK):
            raise ImageError(
                f"{what}: the image {target.name} is not in the shared image cache {root} "
                f"({IMAGE_CACHE_ENV}), and {getpass.getuser()} may only read it: build it "
                f"there as a user who may write it (with {IMAGE_CACHE_ENV}={root}), or unset "
                f"{IMAGE_CACHE_ENV} (and adare_image_cache) to build into your own cache"
            )
        return exclusive_lock(_lock_path(target), timeout, what, mode=SHARED_LOCK_MODE)
    return exclusive_lock(_lock_path(target), timeout, what)


def _lock_path(target: Path) -> Path:
    return target.with_name(target.name + ".lock")


def image_dir(recipe: Recipe) -> Path:
    """Where the cache keeps the image built from ``recipe``."""
    return images_root() / f"{recipe.name}-{recipe.recipe_hash()}"


def is_cached(recipe: Recipe) -> bool:
    """Whether the cache holds the image built from ``recipe``."""
    return (image_dir(recipe) / MANIFEST_NAME).is_file()


def in_image_cache(path: Path) -> bool:
    """Whether ``path`` (a manifest or an image directory) lies in the image cache."""
    return path.resolve().is_relative_to(images_root().resolve())


def cached_manifest(path: Path) -> ImageManifest:
    """The manifest at ``path``, an image in the cache, once it passed the cache's checks:
    its entry, manifest and files owned by a trusted owner, neither symlinks nor writable
    by others, the files inside the entry, the disk's sha256 the recorded one.

    :raise ImageError: a check failed; the message names the path and what did not match.
    """
    root = images_root()
    if root == shared_image_cache():
        check_shared_root(root)
    rule = trust_rule(root)
    check_entry(path, rule)
    manifest = load_manifest(path)
    check_files(manifest, path.parent, rule)
    check_disk(manifest, path.parent)
    return manifest


def cached_image(
    recipe: Recipe,
    *,
    mirror: str = DEFAULT_MIRROR,
    progress: Progress | None = None,
    lock_timeout: float = BUILD_LOCK_TIMEOUT,
) -> Path:
    """The manifest path of ``recipe``'s cached image, building it first if needed.

    :raise ImageError: as :func:`cached_image_manifest`.
    """
    found = cached_image_manifest(
        recipe, mirror=mirror, progress=progress, lock_timeout=lock_timeout
    )
    assert found.path is not None  # loaded from a file
    return found.path


def cached_image_manifest(
    recipe: Recipe,
    *,
    mirror: str = DEFAULT_MIRROR,
    progress: Progress | None = None,
    lock_timeout: float = BUILD_LOCK_TIMEOUT,
) -> ImageManifest:
    """The manifest of ``recipe``'s cached image, building it first if needed.

    :raise ImageError: the mirror lacks the recipe's suite (asked before anything is
        built or locked), the build failed, or the cached image does not pass
        :func:`cached_manifest` or was built from another recipe.
    """
    target = image_dir(recipe)
    manifest = target / MANIFEST_NAME
    if manifest.is_file():
        return _checked(manifest, recipe)
    say = progress or (lambda line: None)
    lock = build_lock(target, f"building {recipe.name}", lock_timeout)  # opened on entry
    check_suite(recipe.suite, mirror)
    say(
        f"image {recipe.name} is not cached at {target}; building it (or waiting for "
        "the process that is)"
    )
    with lock:
        if manifest.is_file():
            return _checked(manifest, recipe)
        # Checked at once: the disk's signature is recorded while it is known good.
        return _checked(build_image(recipe, target, mirror=mirror, progress=say), recipe)


def _checked(path: Path, recipe: Recipe) -> ImageManifest:
    manifest = cached_manifest(path)
    # The entry is named by the recipe's hash (image_dir): no need to hash the recipe again.
    if path.parent.name != f"{recipe.name}-{manifest.recipe_hash}":
        raise ImageError(
            f"the cached image {path.parent.name} is not booted: its manifest records "
            f"the recipe hash {manifest.recipe_hash} (renamed, or built from another "
            "recipe); remove it"
        )
    return manifest


def cached_builtin_image(
    name: str,
    suite: str = DEFAULT_SUITE,
    progress: Progress | None = None,
    *,
    mirror: str = DEFAULT_MIRROR,
) -> Path:
    """The manifest of the built-in image ``debian`` or ``debian-desktop`` of ``suite``.

    :raise ImageError: another name, a suite the mirror lacks, or the build failed.
    """
    return cached_image(builtin_recipe(f"{name}:{suite}"), mirror=mirror, progress=progress)
