"""Suite-named built-ins (``debian:bullseye``): the name, the recipe, and the mirror's say.

The mirror is a real HTTP server on loopback serving a ``dists/`` tree, as a Debian
mirror lays it out.
"""

from __future__ import annotations

import doctest
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image import recipe, suites
from pytest_adare.image.cache import cached_builtin_image, image_dir, images_root
from pytest_adare.image.recipe import builtin_recipe, debian_recipe
from pytest_adare.image.recipe_build import extended_recipe
from pytest_adare.image.recipe_file import load_recipe
from pytest_adare.image.suites import check_suite, split_suite


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[str]:
    """A mirror that has bullseye and nothing else."""
    root = tmp_path / "mirror"
    (root / "debian").mkdir(parents=True)
    (root / "debian/dists/bullseye").mkdir(parents=True)
    (root / "debian/dists/bullseye/Release").write_text("Suite: oldstable\nCodename: bullseye\n")
    handler = functools.partial(_Quiet, directory=str(root))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/debian"
        finally:
            server.shutdown()
            thread.join()


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("debian:bullseye", ("debian", "bullseye")),
        ("debian-desktop:trixie", ("debian-desktop", "trixie")),
        ("debian:stable", ("debian", "stable")),
        ("debian", None),
        ("ubuntu:noble", None),
        ("images/debian:x", None),
        ("recipe.toml", None),
    ],
)
def test_a_built_in_name_with_a_suite_splits_and_anything_else_is_not_one(
    spec: str, parts: tuple[str, str] | None
) -> None:
    assert split_suite(spec) == parts


@pytest.mark.parametrize("spec", ["debian:", "debian:Bookworm", "debian:book worm", "debian:-x"])
def test_a_malformed_suite_is_refused_naming_it(spec: str) -> None:
    with pytest.raises(ImageError, match="is not a Debian suite name"):
        split_suite(spec)


def test_the_default_suite_by_name_is_the_plain_image_one_cache_entry() -> None:
    plain, named = builtin_recipe("debian"), builtin_recipe("debian:bookworm")
    assert named == plain and named.recipe_hash() == plain.recipe_hash()
    assert image_dir(named) == image_dir(plain)
    assert builtin_recipe("debian-desktop:bookworm") == debian_recipe(desktop=True)


def test_another_suite_is_its_own_image_named_after_it() -> None:
    bullseye = builtin_recipe("debian:bullseye")
    assert (bullseye.name, bullseye.suite) == ("debian-bullseye", "bullseye")
    assert bullseye.recipe_hash() != debian_recipe().recipe_hash()
    # Bullseye has no usr-is-merged and keeps dbus-daemon in dbus.
    assert "usr-is-merged" not in bullseye.packages
    desktop = builtin_recipe("debian-desktop:bullseye")
    assert desktop.name == "debian-desktop-bullseye"
    assert "dbus" in desktop.packages and "dbus-daemon" not in desktop.packages
    assert builtin_recipe("debian:trixie").packages == debian_recipe().packages


def test_not_a_built_in_name_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ImageError, match=r"no built-in image named 'ubuntu:noble'.*debian:bu"):
        builtin_recipe("ubuntu:noble")


def test_the_mirror_is_asked_for_the_suite(mirror: str) -> None:
    check_suite("bullseye", mirror)
    with pytest.raises(ImageError) as found:
        check_suite("nosuch", mirror)
    message = str(found.value)
    assert message.startswith(f"unknown Debian suite 'nosuch': the mirror {mirror} has no ")
    assert "dists/nosuch/Release" in message


def test_a_mirror_out_of_reach_is_no_network_naming_it() -> None:
    reach = "no network: the build cannot reach the package mirror http://127.0.0.1:9/debian"
    with pytest.raises(ImageError, match=f"{reach} to check Debian suite 'bullseye'"):
        check_suite("bullseye", "http://127.0.0.1:9/debian", timeout=5)


def test_an_unknown_suite_fails_before_the_build_and_leaves_the_cache_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lines: list[str] = []
    with pytest.raises(ImageError, match="unknown Debian suite 'nosuch'"):
        cached_builtin_image("debian", "nosuch", lines.append, mirror=mirror)
    assert lines == []  # not even "building it"
    assert not images_root().exists() or list(images_root().iterdir()) == []


def test_a_recipe_may_extend_a_built_in_of_another_suite(tmp_path: Path) -> None:
    path = tmp_path / "old-tools.toml"
    path.write_text('base = "debian:bullseye"\ninstall = ["tree"]\n')
    recipe = load_recipe(path)
    assert recipe.builtin_base == "debian:bullseye"
    extended = extended_recipe(recipe)
    assert (extended.name, extended.suite) == ("old-tools", "bullseye")
    assert extended.packages == (*debian_recipe(suite="bullseye").packages, "tree")
    path.write_text('base = "debian:"\n')
    with pytest.raises(ImageError, match=r"old-tools.toml: 'base': .*not a Debian suite name"):
        load_recipe(path)


def test_the_docstring_examples_hold() -> None:
    for module in (suites, recipe):
        outcome = doctest.testmod(module)
        assert outcome.attempted and not outcome.failed, module.__name__
