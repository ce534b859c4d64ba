"""The image matrix: every VM test once per image, like pytest-playwright's browsers.

``--adare-vm`` given several times (ini ``adare_vm``: one per line) makes the session's
image list. Each test whose fixtures include a VM (``guest``, ``async_guest``,
``adare_vm``, ``adare_vm_factory``, ``adare_image``) is then parametrized over it, the
image's short name (:func:`short_name`) its id: ``test_trash[debian]``,
``test_trash[debian-big]``; ``-k debian-big`` selects as usual.
``@pytest.mark.adare_vm(images=[...])`` narrows the list for one test, or sets it when
the command line gave none (:func:`images_for`).

The parameter is session-scoped, so pytest runs one image's tests together and the
session-scoped ``adare_vm`` exists once per image; the pool keys VMs by image and
options, so each image keeps its own VM and warm states. With ``--dist loadgroup``
every image's tests go to one xdist worker (an ``xdist_group`` per image).

A recipe whose ``base`` lists several suites is one image per suite:
``--adare-vm=web.toml`` (or ``@pytest.mark.adare_vm(image="web.toml")``) runs each test
on ``web.toml@bullseye`` and ``web.toml@bookworm``, ids ``web-bullseye`` and
``web-bookworm`` (:func:`expanded`).

Bad lists are refused before any VM starts: an image given twice (or two images with
one short name, or ``debian:bookworm`` beside ``debian`` when bookworm is the default
suite) and a suite-named built-in whose suite the mirror does not have (asked only
when the image is not cached) are usage errors; a marker naming an image outside a
command-line list is a collection error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.manifest import BUILTIN_IMAGES, MANIFEST_NAME
from pytest_adare.image.recipe_file import recipe_variants, split_variant
from pytest_adare.image.suites import split_suite
from pytest_adare.plugin.options import AdareOptions, adare_options, adare_vm_marker

MATRIX_PARAM = "_adare_image"
"""The session-scoped fixture the matrix parametrizes (every VM fixture requests it)."""
IMAGE_PROPERTY = "adare_image"
TEST_PROPERTY = "adare_test"
"""``user_properties`` names: the image's short name and the test's id without it."""


@dataclass(frozen=True)
class MatrixImage:
    """One image of the matrix: its short name (the test id) and its ``--adare-vm`` spec."""

    name: str
    spec: str


def short_name(spec: str) -> str:
    """The id of an image in test ids and the matrix report.

    A built-in name is itself (``debian:bookworm`` → ``debian-bookworm``), a manifest
    (or its directory) its ``name`` (default: the directory's name, as the manifest
    loader has it), a disk its file's stem.

    >>> short_name("debian"), short_name("debian:bookworm"), short_name("/x/win11.qcow2")
    ('debian', 'debian-bookworm', 'win11')
    """
    builtin, colon, suite = spec.partition(":")
    if builtin in BUILTIN_IMAGES and "/" not in spec:
        return f"{builtin}-{suite}" if colon else builtin
    recipe, variant = split_variant(spec)
    if variant is not None:
        return f"{Path(recipe).stem}-{variant}"
    path = Path(spec)
    manifest = path / MANIFEST_NAME if path.is_dir() else path
    if manifest.suffix == ".json":
        try:
            name = json.loads(manifest.read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            name = None  # the resolver reports a bad manifest, when a test needs it
        return name if isinstance(name, str) and name else manifest.resolve().parent.name
    return path.stem or spec


def _builtin_identity(spec: str) -> str:
    """``debian:bookworm`` → ``debian`` when bookworm is the default suite: one image."""
    try:
        if split_suite(spec) is None:
            return spec
    except ImageError:
        return spec
    # Deferred: only a suite-named image needs the recipes at start-up.
    from pytest_adare.image.recipe import builtin_name, builtin_recipe

    recipe = builtin_recipe(spec)
    return builtin_name(recipe.desktop, recipe.suite, recipe.init)


def check_suites(specs: Sequence[str], source: str) -> None:
    """Refuse a suite-named built-in with a malformed suite, or one the mirror does not
    have (asked only when its image is not cached).

    :raise pytest.UsageError: naming ``source``, the image, the suite and the mirror.
    """
    for spec in specs:
        try:
            if split_suite(spec) is None:
                continue
            # Deferred: the resolver (and the mirror) only for a suite-named image.
            from pytest_adare.image.resolve import check_builtin

            check_builtin(spec)
        except ImageError as error:
            raise pytest.UsageError(f"{source}: {spec}: {error}") from None


def expanded(specs: Sequence[str]) -> list[str]:
    """``specs`` with each recipe of several suites replaced by one spec per suite.

    >>> expanded(["debian", "debian:bullseye"])
    ['debian', 'debian:bullseye']
    """
    return [variant for spec in specs for variant in (recipe_variants(spec) or (spec,))]


def matrix_images(specs: Sequence[str], source: str) -> tuple[MatrixImage, ...]:
    """The images of ``specs``, each with its short name.

    :raise pytest.UsageError: an image given twice (also as ``debian:SUITE`` beside
        ``debian`` for the default suite), or two images with one short name (naming
        ``source``).
    """
    images: list[MatrixImage] = []
    for spec in specs:
        image = MatrixImage(short_name(spec), spec)
        for other in images:
            if other.spec == spec:
                raise pytest.UsageError(f"{source}: image {spec!r} given twice")
            if _builtin_identity(other.spec) == _builtin_identity(spec):
                raise pytest.UsageError(
                    f"{source}: images {other.spec!r} and {spec!r} are one image (the "
                    "default Debian suite's); give one of them"
                )
            if other.name == image.name:
                raise pytest.UsageError(
                    f"{source}: images {other.spec!r} and {spec!r} have the same short name "
                    f"{image.name!r} (the test id); give one of them a manifest with another name"
                )
        images.append(image)
    return tuple(images)


IMAGES_KEY = pytest.StashKey[tuple[MatrixImage, ...]]()


def session_images(config: pytest.Config) -> tuple[MatrixImage, ...]:
    """The session's images (``--adare-vm``, ini ``adare_vm``), checked at start-up."""
    return config.stash[IMAGES_KEY]


def pytest_configure(config: pytest.Config) -> None:
    options = adare_options(config)
    source = "--adare-vm" if options.images_fixed else "ini key adare_vm"
    config.stash[IMAGES_KEY] = matrix_images(expanded(options.images), source)
    if not hasattr(config, "workerinput"):  # the xdist controller checked them already
        check_suites(options.images, source)


def images_for(
    images: tuple[MatrixImage, ...], options: AdareOptions, marker: pytest.Mark | None, base: Path
) -> tuple[MatrixImage, ...] | None:
    """The images one test runs on, or None when it is not a matrix test (one image).

    ``images=`` in the marker narrows a command-line list (each entry a short name or a
    spec of it) or, without one, sets the list (a spec relative to the test's
    directory ``base``, or an ini image's name).

    :raise ValueError: a bad ``images=``, or one naming an image outside a command-line
        list (says which).
    """
    kwargs = dict(marker.kwargs) if marker is not None else {}
    wanted = kwargs.get("images")
    image = kwargs.get("image")
    if wanted is None and isinstance(image, str) and image:
        candidate = base / image
        variants = recipe_variants(candidate if candidate.exists() else image)
        if variants:  # a recipe of several suites: the test runs on each
            try:
                return matrix_images(variants, "adare_vm marker: image")
            except pytest.UsageError as error:
                raise ValueError(str(error)) from None
    if wanted is None:
        return images if len(images) > 1 and not image else None
    if kwargs.get("image"):
        raise ValueError("adare_vm marker: give image= or images=, not both")
    if isinstance(wanted, str) or not isinstance(wanted, (list, tuple)) or not wanted:
        raise ValueError(
            f"adare_vm marker: images must be a non-empty list of images, got {wanted!r}"
        )
    chosen: list[MatrixImage] = []
    for entry in wanted:
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"adare_vm marker: images: {entry!r} is not an image")
        known = [i for i in images if entry in (i.name, i.spec)]
        if known:
            chosen.append(known[0])
        elif options.images_fixed:
            names = ", ".join(i.name for i in images)
            raise ValueError(
                f"adare_vm marker: images names {entry!r}, which is not one of this "
                f"session's --adare-vm images ({names})"
            )
        else:
            candidate = base / entry
            spec = str(candidate.resolve()) if candidate.exists() or "/" in entry else entry
            chosen.append(MatrixImage(short_name(spec), spec))
    try:
        return matrix_images([i.spec for i in dict.fromkeys(chosen)], "adare_vm marker: images")
    except pytest.UsageError as error:
        raise ValueError(str(error)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if MATRIX_PARAM not in metafunc.fixturenames:
        return
    config = metafunc.config
    try:
        images = images_for(
            session_images(config),
            adare_options(config),
            adare_vm_marker(metafunc.definition),
            Path(metafunc.definition.path).parent,
        )
    except ValueError as error:
        pytest.fail(f"{metafunc.definition.nodeid}: {error}", pytrace=False)
    if images is not None:
        metafunc.parametrize(MATRIX_PARAM, images, ids=[i.name for i in images], scope="session")


def matrix_image(item: pytest.Item) -> MatrixImage | None:
    """The test's image of the matrix, or None when it runs on one image."""
    callspec = getattr(item, "callspec", None)
    image = callspec.params.get(MATRIX_PARAM) if callspec is not None else None
    return image if isinstance(image, MatrixImage) else None


def base_test_id(nodeid: str, image: str) -> str:
    """``t.py::test_a[1-debian]`` → ``t.py::test_a[1]``: the test across images."""
    head, bracket, params = nodeid.partition("[")
    ids = params[:-1] if bracket and params.endswith("]") else ""
    rest = None
    if ids == image:
        rest = ""
    elif ids.startswith(f"{image}-"):
        rest = ids[len(image) + 1 :]
    elif ids.endswith(f"-{image}"):
        rest = ids[: -len(image) - 1]
    elif f"-{image}-" in ids:
        rest = ids.replace(f"-{image}-", "-", 1)
    if rest is None:
        return nodeid
    return f"{head}[{rest}]" if rest else head


@pytest.fixture(scope="session")
def _adare_image() -> MatrixImage | None:
    """The test's image when the matrix parametrizes it; None: one image, as the options
    and the marker say."""
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist adds a group's name to the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    options = adare_options(config)
    loadgroup = config.getoption("dist", None) == "loadgroup"
    for item in items:
        if MATRIX_PARAM not in getattr(item, "fixturenames", ()):
            continue
        image = matrix_image(item)
        if image is None:
            marker = adare_vm_marker(item)
            spec = (marker.kwargs.get("image") if marker is not None else None) or options.vm
            if not isinstance(spec, str):
                continue
            item.user_properties.append((IMAGE_PROPERTY, short_name(spec)))
            item.user_properties.append((TEST_PROPERTY, item.nodeid))
            continue
        item.user_properties.append((IMAGE_PROPERTY, image.name))
        item.user_properties.append((TEST_PROPERTY, base_test_id(item.nodeid, image.name)))
        if loadgroup and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(f"adare-{image.name}"))
