"""One recipe over several Debian suites (issue 39 item 3): ``base`` as a list of
built-in names, ``recipe.toml@SUITE`` choosing one, and every bad list refused with
the recipe's path and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.recipe_file import (
    is_recipe,
    load_recipe,
    recipe_variants,
    split_variant,
)

SERVICE = 'install = ["python3-yaml"]\nprovision = ["true"]\n'


def recipe(tmp_path: Path, base: str, name: str = "web.toml") -> Path:
    path = tmp_path / name
    path.write_text(f"base = {base}\n{SERVICE}")
    return path


def test_each_suite_is_its_own_image_with_its_own_name_and_hash(tmp_path: Path) -> None:
    path = recipe(tmp_path, '["debian:bullseye", "debian:bookworm"]')
    assert recipe_variants(path) == (f"{path}@bullseye", f"{path}@bookworm")
    old, new = (load_recipe(spec) for spec in recipe_variants(path))
    assert (old.base, old.name) == ("debian:bullseye", "web-bullseye")
    assert (new.base, new.name) == ("debian:bookworm", "web-bookworm")
    assert old.install == new.install == ("python3-yaml",)
    assert old.image_hash(old.base) != new.image_hash(new.base)


def test_a_bare_built_in_in_the_list_is_its_default_suite(tmp_path: Path) -> None:
    path = recipe(tmp_path, '["debian-desktop", "debian-desktop:trixie"]')
    assert recipe_variants(path) == (f"{path}@bookworm", f"{path}@trixie")
    assert load_recipe(f"{path}@bookworm").base == "debian-desktop"


def test_one_base_is_one_image_and_a_list_of_one_needs_no_suite(tmp_path: Path) -> None:
    single = recipe(tmp_path, '"debian:bullseye"', "single.toml")
    assert recipe_variants(single) == ()
    assert load_recipe(single).name == "single"
    listed = recipe(tmp_path, '["debian:bullseye"]', "listed.toml")
    assert load_recipe(listed).base == "debian:bullseye"
    assert recipe_variants(f"{listed}@bullseye") == ()  # names one already


def test_the_variant_mark_splits_only_after_a_recipe() -> None:
    assert split_variant("/home/a@b/web.toml") == ("/home/a@b/web.toml", None)
    assert split_variant("/p/web.toml@bullseye") == ("/p/web.toml", "bullseye")
    assert split_variant("disk.qcow2@x") == ("disk.qcow2@x", None)
    assert is_recipe("/p/web.toml@bullseye") and not is_recipe("disk.qcow2@x")


def test_a_recipe_over_one_suite_of_another(tmp_path: Path) -> None:
    recipe(tmp_path, '["debian:bullseye", "debian:bookworm"]')
    above = tmp_path / "above.toml"
    above.write_text('base = "web.toml@bullseye"\ninstall = ["curl"]\n')
    assert load_recipe(above).base == f"{tmp_path / 'web.toml'}@bullseye"


@pytest.mark.parametrize(
    ("base", "spec_tail", "message"),
    [
        ('["debian:bullseye", "debian:bookworm"]', "",
         "its bases are debian:bullseye, debian:bookworm: choose one with web.toml@bullseye, "
         "or give the recipe to --adare-vm, which runs the tests on each"),
        ('["debian:bullseye", "debian:bookworm"]', "@sid",
         "@sid: no base of that suite (its bases: debian:bullseye, debian:bookworm)"),
        ('"debian:bullseye"', "@bookworm",
         "@bookworm: the recipe has one base ('debian:bullseye'); '@SUITE' chooses among a "
         "list of bases"),
        ("[]", "", "'base' lists 1 to 16 built-in images, got []"),
        ('["debian:bullseye", "disk.qcow2"]', "@bullseye",
         "'base' lists built-in images with their suites (debian:bullseye, "
         "debian-desktop:bookworm), got 'disk.qcow2'"),
        ('["debian:bullseye", 7]', "@bullseye", "got 7"),
        ('["debian", "debian:bookworm"]', "@bookworm",
         "'base' lists suite 'bookworm' twice (debian, debian:bookworm)"),
        ('["debian:Bad"]', "", "'Bad' is not a Debian suite name"),
    ],
)  # fmt: skip
def test_a_bad_list_or_suite_is_refused_naming_the_recipe(
    tmp_path: Path, base: str, spec_tail: str, message: str
) -> None:
    path = recipe(tmp_path, base)
    with pytest.raises(ImageError) as refused:
        load_recipe(f"{path}{spec_tail}")
    assert str(refused.value).startswith(f"recipe {path}: ")
    assert message in str(refused.value)


def test_a_recipe_that_cannot_be_read_expands_to_nothing_and_its_build_says_why(
    tmp_path: Path,
) -> None:
    for base in ("[]", '["debian:Bad"]', '["debian", "debian:bookworm"'):
        assert recipe_variants(recipe(tmp_path, base)) == ()
