"""A recipe's ``services``: systemd units enabled at build, on a systemd base only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_adare.errors import ImageError
from pytest_adare.image.build import recipe_steps
from pytest_adare.image.build_failure import build_failure_cause
from pytest_adare.image.recipe_build import extended_recipe, flattened
from pytest_adare.image.recipe_file import MAX_SERVICES, load_recipe
from pytest_adare.image.rootfs import SERVICES_FAILED, _recipe_hooks

SERVICE = """\
base = "debian-systemd"
name = "report-server"
install = ["python3"]
services = ["report-server.service", "backup.timer", "getty@tty2.service", "backup.timer", "ssh"]
"""


def recipe_file(directory: Path, text: str = SERVICE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report-server.toml"
    path.write_text(text)
    return path


def test_the_units_are_read_in_order_once_each_and_enabled_after_the_steps(
    tmp_path: Path,
) -> None:
    recipe = load_recipe(recipe_file(tmp_path))
    # A bare name is a .service to systemctl, as in `systemctl enable ssh`.
    assert recipe.services == (
        "report-server.service", "backup.timer", "getty@tty2.service", "ssh",
    )  # fmt: skip
    built = extended_recipe(recipe)
    assert built.services == recipe.services and built.init == "systemd"
    assert recipe_steps(built)["services"] == list(recipe.services)  # type: ignore[index]
    (tmp_path / "scratch").mkdir(mode=0o700)
    hooks = _recipe_hooks(built, tmp_path / "scratch", sys.executable)
    assert SERVICES_FAILED in hooks[-1]  # the last step: the units exist by then
    script = (tmp_path / "scratch" / "services.sh").read_text()
    assert script == (
        "systemctl --root=/ enable -- report-server.service backup.timer getty@tty2.service ssh\n"
    )


def test_services_change_the_hash_and_a_recipe_without_keeps_its_own(tmp_path: Path) -> None:
    with_units = load_recipe(recipe_file(tmp_path / "a", SERVICE))
    without = load_recipe(recipe_file(tmp_path / "b", SERVICE.replace("services =", "# ")))
    assert "services" not in without.steps()  # the hashes of recipes without any stay
    assert with_units.image_hash("base") != without.image_hash("base")
    assert extended_recipe(with_units).recipe_hash() != extended_recipe(without).recipe_hash()
    assert extended_recipe(without).recipe_hash() == extended_recipe(
        load_recipe(recipe_file(tmp_path / "c", 'base = "debian-systemd"\nname = "report-server"\n'
                                'install = ["python3"]\n'))
    ).recipe_hash()  # fmt: skip


def test_a_recipe_over_a_recipe_enables_the_lower_units_too(tmp_path: Path) -> None:
    recipe_file(tmp_path)
    top = tmp_path / "top.toml"
    top.write_text('base = "report-server.toml"\nservices = ["nginx.service", "backup.timer"]\n')
    merged = flattened(load_recipe(top))
    assert merged.services == (
        "report-server.service", "backup.timer", "getty@tty2.service", "ssh", "nginx.service",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("units", "message"),
    [
        ('"nginx.service"', r"'services' must be a list"),
        ('["nginx.conf"]', r"'nginx.conf' is not a systemd unit name"),
        ('["-nginx.service"]', r"'-nginx.service' is not a systemd unit name"),
        ('["../etc/x.service"]', r"is not a systemd unit name"),
        ('["x.service; reboot"]', r"is not a systemd unit name"),
        ('["/lib/systemd/system/x.service"]', r"is not a systemd unit name"),
        ('[""]', r"'services' must be a list of non-empty strings"),
        ("[" + ", ".join(f'"u{i}.service"' for i in range(MAX_SERVICES + 1)) + "]",
         rf"at most {MAX_SERVICES} units"),
    ],
)  # fmt: skip
def test_a_bad_unit_list_is_refused_before_anything_is_built(
    tmp_path: Path, units: str, message: str
) -> None:
    path = recipe_file(tmp_path, f'base = "debian-systemd"\nservices = {units}\n')
    with pytest.raises(ImageError, match=message) as caught:
        load_recipe(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("base", ["debian", "debian-desktop", "debian:bullseye"])
def test_services_on_a_busybox_base_say_which_bases_have_systemd(
    tmp_path: Path, base: str
) -> None:
    recipe = load_recipe(recipe_file(tmp_path, f'base = "{base}"\nservices = ["x.service"]\n'))
    with pytest.raises(ImageError, match=r"'services' needs a systemd base \(debian-systemd, "
                       r"debian-xfce\); .* boots busybox init"):  # fmt: skip
        extended_recipe(recipe)


def test_a_failed_enable_says_which_units_and_systemctls_words(tmp_path: Path) -> None:
    recipe = extended_recipe(load_recipe(recipe_file(tmp_path)))
    log = ("Failed to enable unit: Unit file report-server.service does not exist.\n"
           f"{SERVICES_FAILED} 1\n")  # fmt: skip
    assert build_failure_cause(log, recipe, "M") == (
        "systemctl enable report-server.service backup.timer getty@tty2.service ssh failed with "
        "exit code 1: Failed to enable unit: Unit file report-server.service does not exist."
    )
