"""Recipe files: what they may say, what each bad input is told, what names the image."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_adare import image_cli
from pytest_adare.errors import ImageError
from pytest_adare.file_hash import file_sha256
from pytest_adare.image.build_failure import build_failure_cause
from pytest_adare.image.cache import images_root
from pytest_adare.image.manifest import load_manifest, write_manifest
from pytest_adare.image.recipe import debian_recipe
from pytest_adare.image.recipe_build import extended_recipe, flattened
from pytest_adare.image.recipe_file import load_recipe
from pytest_adare.image.resolve import bare_disk_manifest, resolve_image
from pytest_adare.image_cli import main
from pytest_adare.image_provision import PACKAGE_MANAGERS, trace_removal
from pytest_adare.plugin.options import _image_spec

FM_DESKTOP = """\
base = "debian-desktop"
name = "fm-desktop"
install = ["pcmanfm", "mousepad"]
provision = ["update-mime-database /usr/share/mime"]
[[files]]
source = "data/report.txt"
dest = "/home/user/Documents/report.txt"
owner = "user"
mode = "0644"
"""


def write_recipe(directory: Path, text: str = FM_DESKTOP, report: bytes = b"quarterly\n") -> Path:
    (directory / "data").mkdir(parents=True, exist_ok=True)
    (directory / "data/report.txt").write_bytes(report)
    path = directory / "fm-desktop.toml"
    path.write_text(text)
    return path


def test_a_recipe_reads_its_base_steps_and_files(tmp_path: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    assert (recipe.name, recipe.base, recipe.builtin_base) == (
        "fm-desktop", "debian-desktop", "debian-desktop"
    )  # fmt: skip
    assert recipe.install == ("pcmanfm", "mousepad")
    assert recipe.provision == ("update-mime-database /usr/share/mime",)
    (copy,) = recipe.files
    assert copy.source == tmp_path / "data/report.txt"
    assert (copy.dest, copy.owner, copy.mode) == ("/home/user/Documents/report.txt", "user", 0o644)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('base = "debian"\ninstal = ["x"]\n', r"unknown key 'instal' \(known: base, name,"),
        ('base = "debian"\n[[files]]\nsource = "data/nope.txt"\ndest = "/x"\n',
         r"files\[0\]\.source names .*data/nope\.txt, which is not a file"),
        ('base = "debian"\n[[files]]\nsource = "data/report.txt"\ndest = "/x"\nown = "u"\n',
         r"files\[0\]: unknown key 'own'"),
        ('base = "debian"\ninstall = ["pcmanfm; rm -rf /"]\n',
         r"'pcmanfm; rm -rf /' is not a package"),
        ('install = ["x"]\n', r"'base' is missing"),
        ('base = "missing.qcow2"\n', r"'base' names .*missing\.qcow2, which does not exist"),
        ('base = "debian"\nprovision = "echo hi"\n', r"'provision' must be a list"),
        ('base = "debian"\n[[files]]\nsource = "data/report.txt"\ndest = "relative"\n',
         r"files\[0\]\.dest must be an absolute guest path"),
        ('base = "debian"\n[[files]]\nsource = "data/report.txt"\ndest = "/x"\nmode = 644\n',
         r"files\[0\]\.mode must be an octal string"),
        ("base = [", r"not valid TOML"),
    ],
)  # fmt: skip
def test_bad_input_names_the_key_or_file_and_the_recipe(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write_recipe(tmp_path, text)
    with pytest.raises(ImageError, match=message) as caught:
        load_recipe(path)
    assert str(path) in str(caught.value)


def test_the_image_hash_covers_base_steps_and_file_content_not_the_host_path(
    tmp_path: Path,
) -> None:
    one = load_recipe(write_recipe(tmp_path / "one"))
    elsewhere = load_recipe(write_recipe(tmp_path / "two"))
    changed = load_recipe(write_recipe(tmp_path / "three", report=b"revised\n"))
    assert one.image_hash("base") == elsewhere.image_hash("base")
    assert one.image_hash("base") != changed.image_hash("base")
    assert one.image_hash("base") != one.image_hash("other base")
    assert extended_recipe(one).recipe_hash() == extended_recipe(elsewhere).recipe_hash()
    assert extended_recipe(one).recipe_hash() != extended_recipe(changed).recipe_hash()


def test_on_a_built_in_base_the_steps_extend_its_recipe(tmp_path: Path) -> None:
    built_in = debian_recipe(desktop=True)
    extended = extended_recipe(load_recipe(write_recipe(tmp_path)))
    assert extended.packages == (*built_in.packages, "pcmanfm", "mousepad")
    assert extended.provision == ("update-mime-database /usr/share/mime",)
    assert extended.user == "user" and extended.recipe_hash() != built_in.recipe_hash()


def test_a_recipe_over_a_recipe_runs_the_lower_steps_first(tmp_path: Path) -> None:
    write_recipe(tmp_path)
    top = tmp_path / "top.toml"
    top.write_text('base = "fm-desktop.toml"\ninstall = ["mousepad", "gedit"]\nprovision = ["b"]\n')
    merged = flattened(load_recipe(top))
    assert merged.base == "debian-desktop" and merged.name == "top"
    assert merged.install == ("pcmanfm", "mousepad", "gedit")
    assert merged.provision == ("update-mime-database /usr/share/mime", "b")
    loop = tmp_path / "loop.toml"
    loop.write_text('base = "loop2.toml"\n')
    (tmp_path / "loop2.toml").write_text('base = "loop.toml"\n')
    with pytest.raises(ImageError, match="loop back"):
        flattened(load_recipe(loop))


def _fake_cached(target: Path) -> Path:
    """What a build leaves at ``target`` (``<name>-<recipe hash>``), with a tiny disk."""
    target.mkdir(parents=True)
    (target / "disk.qcow2").write_bytes(b"x")
    recorded = {"disk_sha256": file_sha256(target / "disk.qcow2"),
                "recipe_hash": target.name.rsplit("-", 1)[1]}  # fmt: skip
    manifest = {"disk": "disk.qcow2", "format": "qcow2", **recorded}
    (target / "adare-image.json").write_text(json.dumps(manifest))
    return target / "adare-image.json"


def test_a_cached_recipe_image_is_reused_with_one_line_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = write_recipe(tmp_path)
    built_in = extended_recipe(load_recipe(path))
    manifest = _fake_cached(images_root() / f"fm-desktop-{built_in.recipe_hash()}")
    lines: list[str] = []
    assert resolve_image(path, progress=lines.append).path == manifest
    assert len(lines) == 1 and "is cached at" in lines[0] and "not rebuilt" in lines[0]


def test_a_recipe_over_a_disk_is_cached_by_the_disk_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    disk = tmp_path / "own.raw"
    disk.write_bytes(b"\0" * 4096)
    recipe_path = tmp_path / "own.toml"
    recipe_path.write_text('base = "own.raw"\ninstall = ["tree"]\n')
    with pytest.raises(ImageError, match="is not a built-in image, so building it boots"):
        resolve_image(recipe_path)
    built: list[str] = []

    def booted(base, recipe, out, *, flatten, progress):  # type: ignore[no-untyped-def]
        built.append(recipe.name)
        (out / "disk.raw").write_bytes(b"\0" * 1024)
        made = bare_disk_manifest(out / "disk.raw")  # with the hash a booted build records
        return write_manifest(replace(made, disk_sha256=file_sha256(made.disk)), out)

    first = resolve_image(recipe_path, booted=booted)
    again = resolve_image(recipe_path, booted=booted)
    assert built == ["own"] and first.path == again.path
    disk.write_bytes(b"\1" * 4096)  # another base: another image
    resolve_image(recipe_path, booted=booted)
    assert built == ["own", "own"]


def test_a_failed_build_leaves_the_cache_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "own.raw").write_bytes(b"\0" * 4096)
    recipe_path = tmp_path / "own.toml"
    recipe_path.write_text('base = "own.raw"\nprovision = ["false"]\n')

    def failing(base, recipe, out, *, flatten, progress):  # type: ignore[no-untyped-def]
        (out / "disk.qcow2").write_bytes(b"half")
        raise ImageError("provision step 1 ('false') failed with exit code 1")

    with pytest.raises(ImageError, match="provision step 1"):
        resolve_image(recipe_path, booted=failing)
    assert [p.name for p in images_root().iterdir() if not p.name.endswith(".lock")] == []


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("E: Unable to locate package pcmanfn\n", "unknown package 'pcmanfn'"),
        ("E: Package 'foo' has no installation candidate\n", "unknown package 'foo'"),
        (" pcmanfm : Depends: systemd-sysv but it is not going to be installed\n",
         "package 'pcmanfm' needs systemd-sysv, which would replace the image's init; it is "
         'held back (name an alternative, e.g. dbus-x11, or build on base = "debian-systemd")'),
        (" x : Depends: openrc but it is not going to be installed\n",
         "package 'x' needs openrc, which would replace the image's init; it is held back "
         "(name an alternative, e.g. dbus-x11)"),
        ("adare-recipe: provision step 1 failed with exit code 3\n",
         "provision step 1 ('update-mime-database /usr/share/mime') failed with exit code 3"),
        ("W: Failed to fetch http://deb/x  Temporary failure resolving 'deb'\n",
         "no network: the build cannot reach the package mirror M"),
        ("something else\n", None),
    ],
)  # fmt: skip
def test_a_failed_build_says_why_from_its_log(
    tmp_path: Path, log: str, cause: str | None
) -> None:
    recipe = extended_recipe(load_recipe(write_recipe(tmp_path)))
    found = build_failure_cause(log, recipe, "M")
    assert found == cause if cause is None else cause in (found or "")


def test_the_one_line_form_and_bad_names_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["build", "debian", "--desktop", "--install", "pcmanfm; x"]) == 1
    assert "'pcmanfm; x' is not a package name" in capsys.readouterr().err
    assert main(["build", "debian", "--name", "x"]) == 1
    assert "--name names a one-line recipe" in capsys.readouterr().err
    assert main(["build", "windows"]) == 1
    assert "(debian, debian-desktop, debian-systemd, debian-xfce, each optionally :SUITE" in (
        capsys.readouterr().err
    )
    parser = image_cli._parser()
    for given, built in (("debian-systemd", "debian-xfce"), ("debian", "debian-desktop"),
                         ("debian-xfce:bullseye", "debian-xfce")):  # fmt: skip
        args = parser.parse_args(["build", given, "--desktop"])
        assert image_cli._builtin(args)[0] == built
    assert main(["build", "debian:bullseye", "--suite", "trixie"]) == 1
    assert "names suite 'bullseye' and --suite 'trixie': give one" in capsys.readouterr().err
    one_line = extended_recipe(flattened(load_recipe(write_recipe(tmp_path, (
        'base = "debian-desktop"\nname = "debian-desktop-custom"\n'
        'install = ["pcmanfm", "mousepad"]\nprovision = ["true"]\n'
    )))))  # fmt: skip
    manifest = _fake_cached(images_root() / f"debian-desktop-custom-{one_line.recipe_hash()}")
    argv = ["build", "debian", "--desktop", "--install", "pcmanfm,mousepad", "--provision", "true"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "not rebuilt" in out and str(manifest) in out
    assert load_manifest(manifest).path == manifest


@pytest.mark.parametrize(
    ("manager", "output", "package"),
    [
        ("apt-get", "E: Unable to locate package pcmanfn", "pcmanfn"),
        ("dnf", "No match for argument: pcmanfn", "pcmanfn"),
        ("zypper", "No provider of 'pcmanfn' found.", "pcmanfn"),
        ("pacman", "error: target not found: pcmanfn", "pcmanfn"),
    ],
)
def test_each_package_manager_names_the_unknown_package(
    manager: str, output: str, package: str
) -> None:
    pm = next(pm for pm in PACKAGE_MANAGERS if pm.name == manager)
    found = pm.unknown.search(output)
    assert found is not None and (found.group(1) or found.group(2)) == package


def test_the_build_leaves_no_agent_history_journal_or_caches_and_powers_off() -> None:
    apt = next(pm for pm in PACKAGE_MANAGERS if pm.name == "apt-get")
    script = trace_removal("/var/lib/adare run", apt)
    for removed in ("rm -rf '/var/lib/adare run'", "/root/.bash_history", "/var/log/journal/*",
                    "apt-get clean", "cloud-init clean --logs"):  # fmt: skip
        assert removed in script
    assert script.index("sync") < script.index("poweroff") and script.startswith("sleep")


def test_a_recipe_given_to_the_plugin_is_a_path_even_before_it_exists(tmp_path: Path) -> None:
    assert _image_spec("fm.toml", "command line", tmp_path) == str(tmp_path / "fm.toml")
    assert _image_spec("debian-desktop", "command line", tmp_path) == "debian-desktop"


def test_the_command_line_takes_a_built_in_name_as_the_plugin_spells_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    images = images_root()
    for argv, recipe in (
        (["debian-desktop:bullseye"], debian_recipe(desktop=True, suite="bullseye")),
        (["debian", "--desktop", "--suite", "bullseye"], debian_recipe(True, "bullseye")),
        (["debian:trixie"], debian_recipe(suite="trixie")),
    ):
        target = images / f"{recipe.name}-{recipe.recipe_hash()}"
        manifest = target / "adare-image.json" if target.exists() else _fake_cached(target)
        assert main(["build", *argv]) == 0, capsys.readouterr().err
        assert str(manifest) in capsys.readouterr().out
