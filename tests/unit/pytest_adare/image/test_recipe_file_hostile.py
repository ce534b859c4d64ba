"""What a recipe may name on the host and in the guest, and malformed recipes: each
refused with a short error before anything is built (issue 34 items 1, 3 and 6)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tracemalloc
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.build_failure import build_failure_cause
from pytest_adare.image.recipe import debian_recipe
from pytest_adare.image.recipe_file import load_recipe
from tests.unit.pytest_adare.image.test_recipe_files import write_recipe


@pytest.mark.parametrize(
    ("dest", "why"),
    [
        ("/../../etc/passwd", "a '..' component"),
        ("/usr/bin/../../etc/passwd", "a '..' component"),
        ("/etc/./passwd", "a '.' component"),
        ("/etc//passwd", "a '' component"),
        ("/etc/", "a '' component"),
        ("/etc/pass\nwd", "a control character"),
    ],
)
def test_a_destination_that_could_climb_out_of_the_image_is_refused(
    tmp_path: Path, dest: str, why: str
) -> None:
    text = f'base = "debian"\n[[files]]\nsource = "data/report.txt"\ndest = {json.dumps(dest)}\n'
    with pytest.raises(ImageError, match=r"files\[0\]\.dest .* is not a plain absolute path"):
        load_recipe(write_recipe(tmp_path, text))
    with pytest.raises(ImageError) as caught:
        load_recipe(write_recipe(tmp_path, text))
    assert why.split()[-1] in str(caught.value)


def test_a_copied_file_stays_inside_the_recipes_directory(tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.write_text("the builder's own secret\n")
    recipe_dir = tmp_path / "project"
    (recipe_dir / "data").mkdir(parents=True)
    (recipe_dir / "data/link").symlink_to(outside)
    (recipe_dir / "data/inside").symlink_to("report.txt")
    for source, message in (
        ("/etc/shadow", "must be a path inside the recipe's directory"),
        ("../secret", "must be a path inside the recipe's directory"),
        ("data/../../secret", "must be a path inside the recipe's directory"),
        ("~/.ssh/id_rsa", "must be a path inside the recipe's directory"),
        ("data/link", f"leads to {outside}, outside the recipe's directory"),
    ):
        text = f'base = "debian"\n[[files]]\nsource = "{source}"\ndest = "/x"\n'
        with pytest.raises(ImageError, match=re.escape(message)):
            load_recipe(write_recipe(recipe_dir, text))
    text = 'base = "debian"\n[[files]]\nsource = "data/inside"\ndest = "/x"\n'
    (copy,) = load_recipe(write_recipe(recipe_dir, text)).files  # a symlink that stays inside
    assert copy.source == recipe_dir / "data/report.txt"


def test_without_a_mode_a_file_keeps_its_own(tmp_path: Path) -> None:
    text = 'base = "debian"\n[[files]]\nsource = "data/report.txt"\ndest = "/x"\n'
    path = write_recipe(tmp_path, text)
    (tmp_path / "data/report.txt").chmod(0o600)
    assert load_recipe(path).files[0].mode == 0o600
    (tmp_path / "data/report.txt").chmod(0o755)
    assert load_recipe(path).files[0].mode == 0o755


def test_a_fifo_as_source_or_recipe_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.toml")
    with pytest.raises(ImageError, match=r"pipe\.toml is a FIFO, not a regular file"):
        load_recipe(tmp_path / "pipe.toml")
    os.mkfifo(tmp_path / "fifo")
    text = 'base = "debian"\n[[files]]\nsource = "fifo"\ndest = "/x"\n'
    with pytest.raises(ImageError, match=r"fifo is a FIFO, not a regular file"):
        load_recipe(write_recipe(tmp_path, text))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"base = " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested too deeply to be a recipe"),
        (b'base = "debian"\nname = "caf\xe9"\n', r"not UTF-8 text \(byte 0xe9 on line 2\)"),
        (b'base = "debian"\ninstall = "' + b"x" * (20 << 20) + b'"\n', "larger than 1 MiB"),
    ],
    ids=["deep", "latin-1", "20-MiB"],
)
def test_a_malformed_recipe_gets_a_short_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ImageError, match=message) as caught:
        load_recipe(path)
    assert len(str(caught.value)) < 300


def test_a_wrong_value_is_quoted_short(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, 'base = "debian"\ninstall = "' + "x" * 500_000 + '"\n')
    with pytest.raises(ImageError, match=r"'install' must be a list .* characters\)") as caught:
        load_recipe(path)
    assert len(str(caught.value)) < 300


def test_a_big_copied_file_is_hashed_in_blocks(tmp_path: Path) -> None:
    big = 256 << 20
    write_recipe(tmp_path)
    with (tmp_path / "data/big.bin").open("wb") as handle:
        handle.truncate(big)
    text = 'base = "debian"\n[[files]]\nsource = "data/big.bin"\ndest = "/big"\n'
    path = write_recipe(tmp_path, text)
    tracemalloc.start()
    try:
        (copy,) = load_recipe(path).files
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert copy.sha256 == hashlib.sha256(bytes(big)).hexdigest()
    assert peak < 16 << 20, f"{peak >> 20} MiB held to hash a {big >> 20} MiB file"


def test_a_file_the_image_cannot_take_is_named_with_the_shells_reason() -> None:
    log = (
        "I: running --customize-hook\n"
        "/bin/sh: 1: cannot create /etc/motd: Is a directory\n"
        "adare-recipe: copying files[0] to /etc/motd failed\n"
    )
    assert build_failure_cause(log, debian_recipe(), "M") == (
        "copying a recipe's file to /etc/motd in the image failed: "
        "/bin/sh: 1: cannot create /etc/motd: Is a directory"
    )
