"""Built-in images cached under ``$XDG_CACHE_HOME/pytest-adare/images/<name>-<recipe hash>/``.

The first user builds; concurrent users (pytest-xdist workers, two terminals)
wait on an ``fcntl`` lock next to the image instead of building it twice. The
build happens in a temporary sibling directory renamed into place at the end,
so an image directory that exists is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_adare.cache_dir import cache_root, exclusive_lock
from pytest_adare.errors import ImageError
from pytest_adare.image.build import build_image
from pytest_adare.image.manifest import MANIFEST_NAME
from pytest_adare.image.recipe import DEFAULT_MIRROR, Recipe, debian_recipe

Progress = Callable[[str], None]
BUILD_LOCK_TIMEOUT = 1800.0


def images_root() -> Path:
    """``$XDG_CACHE_HOME/pytest-adare/images``."""
    return cache_root() / "images"


def image_dir(recipe: Recipe) -> Path:
    """Where the cache keeps the image built from ``recipe``."""
    return images_root() / f"{recipe.name}-{recipe.recipe_hash()}"


def cached_image(
    recipe: Recipe,
    *,
    mirror: str = DEFAULT_MIRROR,
    progress: Progress | None = None,
    lock_timeout: float = BUILD_LOCK_TIMEOUT,
) -> Path:
    """The manifest of ``recipe``'s cached image, building it first if needed."""
    target = image_dir(recipe)
    manifest = target / MANIFEST_NAME
    if manifest.is_file():
        return manifest
    say = progress or (lambda line: None)
    lock = target.with_name(target.name + ".lock")
    say(
        f"image {recipe.name} is not cached at {target}; building it (or waiting for "
        "the process that is)"
    )
    with exclusive_lock(lock, lock_timeout, f"building {recipe.name}"):
        if manifest.is_file():
            return manifest
        return build_image(recipe, target, mirror=mirror, progress=say)


def cached_builtin_image(name: str, progress: Progress | None = None) -> Path:
    """The manifest of the built-in image ``debian`` or ``debian-desktop``."""
    if name not in ("debian", "debian-desktop"):
        raise ImageError(f"no built-in image named {name!r} (known: debian, debian-desktop)")
    return cached_image(debian_recipe(desktop=name == "debian-desktop"), progress=progress)
