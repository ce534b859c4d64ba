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
from pytest_adare.image.manifest import MANIFEST_NAME
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


def cached_image(
    recipe: Recipe,
    *,
    mirror: str = DEFAULT_MIRROR,
    progress: Progress | None = None,
    lock_timeout: float = BUILD_LOCK_TIMEOUT,
) -> Path:
    """The manifest of ``recipe``'s cached image, building it first if needed.

    :raise ImageError: the mirror lacks the recipe's suite (asked before anything is
        built or locked), or the build failed.
    """
    target = image_dir(recipe)
    manifest = target / MANIFEST_NAME
    if manifest.is_file():
        return manifest
    say = progress or (lambda line: None)
    lock = build_lock(target, f"building {recipe.name}", lock_timeout)  # opened on entry
    check_suite(recipe.suite, mirror)
    say(
        f"image {recipe.name} is not cached at {target}; building it (or waiting for "
        "the process that is)"
    )
    with lock:
        if manifest.is_file():
            return manifest
        return build_image(recipe, target, mirror=mirror, progress=say)


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
