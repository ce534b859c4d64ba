"""What the built-in recipes carry, and which changes rename (rebuild) an image."""

from __future__ import annotations

import subprocess
from dataclasses import replace

from pytest_adare.image.recipe import debian_recipe


def test_console_image_carries_nft_and_only_the_nf_tables_module() -> None:
    console = debian_recipe()
    assert "nftables" in console.packages
    assert console.rootfs_modules == ("nf_tables",)
    assert console.rootfs_module_dirs == ()


def test_desktop_image_has_no_firewall_of_its_own() -> None:
    desktop = debian_recipe(desktop=True)
    assert "nftables" not in desktop.packages
    assert desktop.rootfs_modules == ()


def test_an_optional_field_at_its_default_leaves_the_hash_alone() -> None:
    desktop = debian_recipe(desktop=True)
    with_modules = replace(desktop, rootfs_modules=("nf_tables",))
    assert replace(desktop, rootfs_modules=()).recipe_hash() == desktop.recipe_hash()
    assert with_modules.recipe_hash() != desktop.recipe_hash()


def test_changing_the_console_modules_renames_the_image() -> None:
    console = debian_recipe()
    assert replace(console, rootfs_modules=()).recipe_hash() != console.recipe_hash()
    assert replace(console, rootfs_modules=("nf_tables", "nft_reject_inet")).recipe_hash() != (
        console.recipe_hash()
    )


def test_desktop_image_carries_the_demo_dialog_and_what_it_runs_on() -> None:
    desktop = debian_recipe(desktop=True)
    assert "demo-dialog.sh" in desktop.scripts
    assert {"python3-tk", "fonts-dejavu-core"} <= set(desktop.packages)
    assert "demo-dialog.sh" not in debian_recipe().scripts
    script = desktop.script("demo-dialog.sh").decode()
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    program = script.split("<<'PYTHON'\n", 1)[1].rsplit("PYTHON\n", 1)[0]
    compile(program, "demo-dialog.sh (python)", "exec")
    assert "import tkinter" in program
