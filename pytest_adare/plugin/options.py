"""The plugin's options: command line flags, their ini twins, and the ``adare_vm`` marker.

Every option exists twice, as ``--adare-NAME`` and as the ini key ``adare_NAME``; the
command line wins. The VM options come from :class:`~pytest_adare.vm_options.VMOptions`'
fields (their metadata says which are flags and which marker arguments); the plugin's
own (image, isolation, artifacts, keep, hypervisors, pcap, evidence, recording) are
:data:`PLUGIN_SPECS`. :func:`read_options` turns flags and ini into
one validated :class:`AdareOptions`; :func:`apply_marker` lays a test's ``adare_vm(...)``
markers on top and returns what that test needs (:class:`VMRequest`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_adare.analysis.tool_envs import ToolSpec
from pytest_adare.host_access import writable_shares
from pytest_adare.image.recipe_file import split_variant
from pytest_adare.machine.registry import backend_for
from pytest_adare.plugin.hypervisors import (
    assign_hypervisor,
    parse_hypervisors,
    parse_limit,
    worker_of,
)
from pytest_adare.vm_options import (
    GUI_MODES,
    OptionField,
    VMOptions,
    option_fields,
    parse_switch,
)
from pytest_adare.vm_options import parse_memory as _parse_memory

C = TypeVar("C", bound=str)

ISOLATIONS = ("snapshot", "none", "reboot")
KEEP_MODES = ("never", "on-failure", "always")
EVIDENCE_MODES = ("off", "on-failure", "always")
RECORD_MODES = ("off", "on-failure", "always")
OS_NAMES = ("linux", "windows")

Reader = Callable[[str, str, Path], Any]
"""(text, where it came from, the directory relative paths start at) → the value;
:raise pytest.UsageError: naming the source."""


@dataclass(frozen=True)
class OptionSpec:
    """One option: its flag, ini key, allowed values, help text and docs cells.

    ``dest`` is the :class:`AdareOptions` attribute it sets (default: ``name``), or for a
    VM option (``vm_field``) the :class:`VMOptions` field.
    """

    name: str
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str = "VALUE"
    switch: bool = False
    """A flag without a value (``--adare-pcap``); its ini twin takes true/false."""
    multiple: bool = False
    """Given several times (``--adare-vm=A --adare-vm=B``); its ini twin takes one per
    line; the value is the tuple of them."""
    read: Reader | None = None
    dest: str | None = None
    vm_field: str | None = None
    doc_values: str = ""
    doc_default: str = ""

    @property
    def flag(self) -> str:
        return "--adare-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "adare_" + self.name

    @property
    def values(self) -> str:
        """The docs' values cell."""
        if self.doc_values:
            return self.doc_values
        if self.switch:
            return "a flag (ini: `true`/`false`)"
        return ", ".join(f"`{c}`" for c in self.choices or ())

    def value(self, raw: str, source: str, base: Path) -> Any:
        """The option's value from its text; :raise pytest.UsageError: naming ``source``."""
        if self.read is not None:
            return self.read(raw, source, base)
        if self.choices and raw not in self.choices:
            raise pytest.UsageError(f"{source}: {raw!r} is not one of {', '.join(self.choices)}")
        if self.switch:
            return _usage(parse_switch, raw, source)
        return raw


def _usage(parse: Callable[[object], Any], value: object, source: str) -> Any:
    try:
        return parse(value)
    except ValueError as error:
        raise pytest.UsageError(f"{source}: {error}") from None


def vm_option_spec(option: OptionField) -> OptionSpec:
    """The flag of one VM option, made from its field."""
    return OptionSpec(
        option.name,
        option.info.help,
        choices=option.choices,
        metavar=option.info.metavar,
        read=lambda raw, source, base: _usage(option.parse, raw, source),
        vm_field=option.field,
        doc_values=option.values,
        doc_default=option.info.doc_default,
    )


def _positive_minutes(value: object) -> float:
    minutes = float(str(value))
    if not minutes > 0:
        raise ValueError(f"minutes must be positive, got {value}")
    return minutes


def _image_spec(value: str, source: str, base: Path) -> str:
    """Paths are taken relative to where they were given; built-in names stay names."""
    recipe, variant = split_variant(value)
    if variant is not None:  # recipe.toml@bullseye: the recipe's path, then its suite
        return f"{_image_spec(recipe, source, base)}@{variant}"
    candidate = base / value
    suffixes = (".json", ".qcow2", ".img", ".raw", ".toml")
    if "/" in value or value.endswith(suffixes) or candidate.exists():
        return str(candidate.resolve())
    return value


PLUGIN_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "vm",
        "guest image: an adare-image.json manifest, its directory, a disk image, a recipe "
        "(.toml; one of its suites: recipe.toml@bullseye), or a built-in name (debian, "
        "debian-desktop, debian-systemd, debian-xfce, each with a Debian suite if you like: "
        "debian:bullseye); recipes and built-in images "
        "are built on first use and cached. Given several "
        "times (ini: one per line), every VM test runs once per image, its short name in "
        "the test id. Without it, tests that need a VM are skipped.",
        metavar="IMAGE", read=_image_spec, multiple=True, dest="images",
        doc_values="a manifest `adare-image.json`, its directory, a disk (qcow2, raw, vmdk, "
        "vdi, vhdx, vpc), a recipe `.toml` "
        "([images](images.md#recipes-your-software-in-the-guest); of several suites: each, "
        "or one as `recipe.toml@bullseye`), or `debian` / `debian-desktop` / "
        "`debian-systemd` / `debian-xfce`, each with a Debian suite if you like "
        "(`debian:bullseye`, `debian:trixie`); "
        "several: a matrix, every VM test once per image "
        "([matrix](matrix.md))",
        doc_default="none: VM tests skip",
    ),
    OptionSpec(
        "isolation",
        "clean state per test: snapshot restores the saved ready state, "
        "reboot restarts the VM, none reuses it as the last test left it "
        "(default: snapshot)",
        ISOLATIONS, doc_default="`snapshot`",
    ),
    OptionSpec(
        "artifacts",
        "directory for failure evidence, one sub-directory per test "
        "(default: adare-artifacts under pytest's base temp dir)",
        metavar="DIR", read=lambda raw, source, base: (base / raw).resolve(),
        doc_values="a directory", doc_default="`adare-artifacts` under pytest's base temp dir",
    ),
    OptionSpec(
        "keep",
        "keep VMs for a look afterwards: a failing test's VMs keep running after pytest "
        "(adare-vm shell NAME), and always also keeps every VM's disk overlay with how to "
        "boot it again (default: never)",
        KEEP_MODES, doc_default="`never`",
    ),
    OptionSpec(
        "keep_idle",
        "minutes a failing test's VM kept running by --adare-keep may go unused (no "
        "adare-vm shell open) before its keeper stops it (default: 30)",
        metavar="MINUTES", read=lambda raw, source, base: _usage(_positive_minutes, raw, source),
        doc_values="minutes", doc_default="`30`",
    ),
    OptionSpec(
        "pause_on_fail",
        "when a test that used VMs fails, pause before its teardown: print adare-vm shell "
        "NAME for each VM and wait for Enter on the terminal (needs one; not with -n)",
        switch=True, doc_default="off: with it, a failing test's VMs stay alive until Enter "
        "([debugging](debugging.md#pause-a-failing-test))",
    ),
    OptionSpec(
        "pcap",
        "capture each test's guest network traffic (its call phase) as network.pcap in "
        "its artifacts (ini: true/false)",
        switch=True, doc_default="off: each test's call-phase traffic as `network.pcap` in "
        "its artifacts",
    ),
    OptionSpec(
        "evidence",
        "collect a hypervisor evidence bundle per test (RAM as ELF, raw disk, the pcap of a "
        "running capture, manifest.json with sha256s and CASE JSON-LD) into its artifacts "
        "(default: off)",
        EVIDENCE_MODES, doc_default="`off`: a hypervisor evidence bundle (`evidence/`: RAM, "
        "disk, pcap, manifest) per test, named in the report "
        "([forensics](forensics.md#evidence-from-the-hypervisor))",
    ),
    OptionSpec(
        "record",
        "film each test's screen: the host keeps the last 20 s of QMP screendumps at 2 fps "
        "and writes recording.webp into the artifacts of a failing test (always: of every "
        "test) (default: on-failure)",
        RECORD_MODES, doc_default="`on-failure`: a film of the test's screen "
        "(`recording.webp`, the last 20 s) for a failing test "
        "([gui](gui.md#the-film-of-a-failure))",
    ),
    OptionSpec(
        "baseline",
        "compare this run's matrix report with an earlier run's adare-matrix.json and list "
        "what changed: verdicts, soft checks, recorded values (default: none)",
        metavar="OLD.json", read=lambda raw, source, base: _baseline_path(raw, source, base),
        doc_values="an earlier run's `adare-matrix.json`",
        doc_default="none: with a file, the matrix report lists what changed since it "
        "([matrix](matrix.md#what-changed-since-an-earlier-run))",
    ),
    OptionSpec(
        "tool",
        "a forensic tool version as a pip requirement (dissect.target==3.23.1): a test's "
        "analysis step (ground_truth.validate) runs once per version, each in its own "
        "virtual environment built once into the cache; given several times (ini: one per "
        "line) (default: the version installed here, in-process)",
        metavar="REQUIREMENT", read=lambda raw, source, base: _tool_spec(raw, source),
        multiple=True, dest="tools",
        doc_values="a pip requirement (`dissect.target==3.23.1`), several separated by spaces",
        doc_default="none: the analysis step runs in-process with the installed version "
        "([tool validation](tool-validation.md#several-tool-versions))",
    ),
    OptionSpec(
        "tools_baseline",
        "compare this run's adare-tools.json with an earlier run's and list the verdicts "
        "that changed (default: none)",
        metavar="OLD.json", read=lambda raw, source, base: _baseline_path(raw, source, base),
        doc_values="an earlier run's `adare-tools.json`",
        doc_default="none: with a file, `adare-tools.md` lists the verdicts changed since it "
        "([tool validation](tool-validation.md#several-tool-versions))",
    ),
    OptionSpec(
        "hypervisor",
        "run the guests as transient domains on this libvirt hypervisor (qemu:///system, "
        "qemu+ssh://user@host/system; the agent over its serial channel) instead of a QEMU "
        "started here; several as URI1,URI2 or @FILE (one per line): -n workers spread "
        "over them, each on one (default: none; docs/libvirt.md)",
        metavar="URI", dest="hypervisors",
        read=lambda raw, source, base: parse_hypervisors(raw, base, source) if raw.strip() else (),
        doc_values="a libvirt URI (`qemu:///system`, `qemu:///session`, "
        "`qemu+ssh://user@host/system`), several as `URI1,URI2`, or `@FILE` (one per line)",
        doc_default="none: QEMU started by the plugin; with a URI the guests are transient "
        "domains there, reached over the serial link ([libvirt](libvirt.md))",
    ),
    OptionSpec(
        "hypervisor_limit",
        "the most VMs (xdist workers) one hypervisor takes; -n beyond hypervisors x limit "
        "is an error (default: no limit)",
        metavar="N", read=lambda raw, source, base: parse_limit(raw, source),
        doc_values="a positive number",
        doc_default="no limit: the most VMs (xdist workers) one hypervisor of "
        "`--adare-hypervisor` takes; `-n` beyond hypervisors x limit is a usage error "
        "([libvirt](libvirt.md#several-hypervisors-n-n))",
    ),
    OptionSpec(
        "environments",
        "map an adare experiment's environment (metadata.yml environments) to an image: "
        "NAME=IMAGE, IMAGE as --adare-vm takes it; given several times (ini: one "
        "NAME = IMAGE a line); an unmapped environment's experiment is skipped",
        metavar="NAME=IMAGE", read=lambda raw, source, base: _environment(raw, source, base),
        multiple=True,
        doc_values="`NAME = IMAGE` lines (IMAGE: anything `--adare-vm` takes)",
        doc_default="none: an experiment's environments are skipped, naming the line to add "
        "([playbooks](playbooks.md#environments))",
    ),
    OptionSpec(
        "image_cache",
        "a directory of built images shared by several users or CI jobs (sets "
        "ADARE_IMAGE_CACHE): built images are published there readable by all; a user who "
        "may only read it uses what is there and never builds (default: each user's cache)",
        metavar="DIR", read=lambda raw, source, base: (base / raw).expanduser().resolve(),
        doc_values="a directory",
        doc_default="`$ADARE_IMAGE_CACHE`, else `~/.cache/pytest-adare/images`: each "
        "user's own ([images](images.md#a-shared-image-cache))",
    ),
)

def _environment(raw: str, source: str, base: Path) -> tuple[str, str]:
    """``NAME = IMAGE`` (an adare experiment's environment and the image it runs on)."""
    name, equals, image = raw.partition("=")
    if not equals or not name.strip() or not image.strip():
        raise pytest.UsageError(f"{source}: {raw!r} is not NAME = IMAGE")
    return name.strip(), _image_spec(image.strip(), source, base)


def _tool_spec(raw: str, source: str) -> str:
    try:
        return ToolSpec.parse(raw).text
    except ValueError as error:
        raise pytest.UsageError(f"{source}: {error}") from None


def _baseline_path(raw: str, source: str, base: Path) -> Path:
    path = (base / raw).resolve()
    if not path.is_file():
        raise pytest.UsageError(f"{source}: no file at {path}")
    return path


def option_specs() -> tuple[OptionSpec, ...]:
    """Every flag: the image, the VM options (from their fields), the plugin's own."""
    vm_specs = tuple(vm_option_spec(o) for o in option_fields() if o.exposed("cli"))
    return (PLUGIN_SPECS[0], *vm_specs, *PLUGIN_SPECS[1:])


def _marker_vm_options() -> dict[str, OptionField]:
    return {o.name: o for o in option_fields() if o.exposed("marker")}


MARKER_KEYS: tuple[str, ...] = (
    "image", "images", "gui", "os", *(n for n in _marker_vm_options() if n != "gui"),
    "isolation",
)  # fmt: skip

MARKER_DOC = (
    f"adare_vm({', '.join(k + '=None' for k in MARKER_KEYS)}): the VM this test's guest "
    "runs on. image and the VM options override the --adare-* options of the same name "
    "(a test whose VM differs from the session VM gets its own VM, shared with tests "
    "asking for the same); images=[...] narrows the session's image matrix for this test "
    "(or sets it, when no --adare-vm is given); isolation overrides --adare-isolation for "
    "this test; gui=True "
    "(or 'auto'/'agent'/'host') needs an image with a desktop; os='linux'|'windows' needs "
    "that guest OS. Markers on the function, class and module combine, the closest "
    "winning per argument. Unmet needs skip the test with the reason (docs/plugin.md)."
)


@dataclass(frozen=True)
class AdareOptions:
    """The session's options after merging command line and ini (command line wins).

    ``given`` holds the VM options the flags or ini keys set (field name → value);
    :attr:`session_vm` is the session VM's options made from them. ``images`` are the
    ``--adare-vm`` values (a matrix when several), ``vm`` the first; ``images_fixed``
    says they came from the command line (a marker may then only narrow them).
    """

    vm: str | None = None
    images: tuple[str, ...] = ()
    images_fixed: bool = False
    baseline: Path | None = None
    tools: tuple[str, ...] = ()
    tools_baseline: Path | None = None
    isolation: str = "snapshot"
    artifacts: Path | None = None
    keep: str = "never"
    keep_idle: float = 30.0
    pause_on_fail: bool = False
    hypervisors: tuple[str, ...] = ()
    hypervisor_limit: int | None = None
    pcap: bool = False
    evidence: str = "off"
    record: str = "on-failure"
    image_cache: Path | None = None
    environments: tuple[tuple[str, str], ...] = ()
    given: Mapping[str, Any] = field(default_factory=dict)

    @property
    def hypervisor(self) -> str | None:
        """The hypervisor this process's VMs run on (one of ``hypervisors``)."""
        value = self.given.get("hypervisor")
        return value if isinstance(value, str) else None

    @property
    def session_vm(self) -> VMOptions:
        """The session VM's options (no marker)."""
        return VMOptions.from_given(self.given)


@dataclass(frozen=True)
class VMRequest:
    """What one test asks for: the image and VM options, plus its needs and isolation.

    ``vm_key`` identifies the VM configuration: tests with equal keys share a VM.
    """

    image: str
    options: VMOptions
    isolation: str
    needs_desktop: bool = False
    needs_os: str | None = None

    @property
    def vm_key(self) -> tuple[str, VMOptions]:
        return (self.image, self.options)

    def describe(self) -> str:
        """Short text naming the VM configuration, for progress lines and errors."""
        return f"{self.image} {self.options.describe()}"


def register_options(parser: pytest.Parser) -> None:
    """Add every ``--adare-*`` flag and its ``adare_*`` ini twin."""
    group = parser.getgroup("adare", "pytest-adare: QEMU guest VMs as fixtures")
    for spec in option_specs():
        choices = f" ({'|'.join(spec.choices)})" if spec.choices else ""
        if spec.switch:
            group.addoption(
                spec.flag, dest=spec.ini, action="store_const", const="true", default=None,
                help=spec.help,
            )  # fmt: skip
        else:
            group.addoption(
                spec.flag, dest=spec.ini, default=None, metavar=spec.metavar,
                help=spec.help + choices, action="append" if spec.multiple else "store",
            )  # fmt: skip
        parser.addini(
            spec.ini, f"{spec.flag} as an ini key: {spec.help}", type="string", default=""
        )


def parse_memory(value: str | int, source: str) -> int:
    """A memory size in MiB from ``1024``, ``512M``, ``512MiB``, ``2G`` or ``2GiB``.

    :raise pytest.UsageError: for anything else, naming ``source``.
    """
    return int(_usage(_parse_memory, value, source))


def _raw_value(config: pytest.Config, spec: OptionSpec) -> tuple[str | None, str, Path]:
    """The option's text, where it came from, and the directory relative paths start at."""
    cli = config.getoption(spec.ini)
    if cli is not None:
        return str(cli), spec.flag, config.invocation_params.dir
    ini = str(config.getini(spec.ini) or "").strip()
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    if ini:
        return ini, f"ini key {spec.ini}", base
    return None, "", base


def _raw_values(config: pytest.Config, spec: OptionSpec) -> tuple[list[str], str, Path]:
    """A ``multiple`` option's texts (each flag, or each ini line) and where they came from."""
    cli = config.getoption(spec.ini)
    if cli:
        return [str(v) for v in cli], spec.flag, config.invocation_params.dir
    raw, source, base = _raw_value(config, spec)
    lines = [line.strip() for line in (raw or "").splitlines()]
    return [line for line in lines if line], source, base


OPTIONS_KEY = pytest.StashKey["AdareOptions"]()
"""Where ``pytest_configure`` keeps the session's options."""


def adare_options(config: pytest.Config) -> AdareOptions:
    """The session's merged, validated options."""
    return config.stash[OPTIONS_KEY]


def read_options(config: pytest.Config) -> AdareOptions:
    """Merge command line and ini into validated options.

    :raise pytest.UsageError: on any bad value, naming the flag or ini key.
    """
    values: dict[str, Any] = {}
    given: dict[str, Any] = {}
    sources: list[str] = []
    for spec in option_specs():
        if spec.multiple:
            texts, source, base = _raw_values(config, spec)
            if texts:
                values[spec.dest or spec.name] = tuple(spec.value(t, source, base) for t in texts)
                if spec.name == "vm":  # from the command line, a marker may only narrow it
                    values["images_fixed"] = source == spec.flag
            continue
        raw, source, base = _raw_value(config, spec)
        if raw is None:
            continue
        value = spec.value(raw, source, base)
        if spec.vm_field is not None:
            given[spec.vm_field] = value
            sources.append(source)
        else:
            values[spec.dest or spec.name] = value
    if values.get("hypervisors"):
        given["hypervisor"] = assign_hypervisor(
            values["hypervisors"], *worker_of(config), values.get("hypervisor_limit")
        )
        sources.append("--adare-hypervisor")
    try:  # the combination, checked at start-up (and that its backend can honour it)
        backend_for(VMOptions.from_given(given))
    except ValueError as error:
        raise pytest.UsageError(f"{', '.join(sources)}: {error}") from None
    images = values.get("images", ())
    return AdareOptions(**values, vm=images[0] if images else None, given=given)


def adare_vm_marker(node: pytest.Item) -> pytest.Mark | None:
    """Every ``adare_vm`` marker on ``node`` (function, class, module) as one, the closest
    winning per argument (``@pytest.mark.adare_vm(isolation="none")`` on a test and
    ``pytestmark = pytest.mark.adare_vm(warm="off")`` on its module both hold)."""
    marks = list(node.iter_markers("adare_vm"))
    if not marks:
        return None
    # iter_markers yields the closest first; in combined_with the later mark wins.
    return functools.reduce(lambda far, near: far.combined_with(near), reversed(marks))


def _variant_of(image: str, recipe: str) -> bool:
    """``image`` is one suite of the marker's recipe of several (``web.toml@bullseye`` of
    ``web.toml``, the marker's path perhaps relative to the test's directory): the
    matrix chose it, so it is the test's image."""
    path, variant = split_variant(image)
    return variant is not None and (path == recipe or path.endswith(f"/{recipe}"))


def apply_marker(
    options: AdareOptions, marker: pytest.Mark | None, image: str | None = None
) -> VMRequest:
    """The test's :class:`VMRequest`: the session options with its marker laid on top.

    A VM option given as None takes its default where None is a value it has
    (``hypervisor=None``: QEMU started here; ``memory=None``: the image's), else the
    session's. ``image`` is the test's image of the matrix (its ``images=`` are
    :mod:`pytest_adare.plugin.matrix`'s business).

    :raise ValueError: for unknown marker arguments or bad values (says which).
    """
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        raise ValueError(
            "adare_vm(...) takes keyword arguments only, e.g. @pytest.mark.adare_vm(gui=True)"
        )
    unknown = sorted(set(kwargs) - set(MARKER_KEYS))
    if unknown:
        raise ValueError(
            f"adare_vm marker: unknown argument(s) {', '.join(unknown)}; "
            f"known: {', '.join(MARKER_KEYS)}"
        )
    kwargs.pop("images", None)
    named = kwargs.pop("image", None)
    if named and not (isinstance(named, str) and image and _variant_of(image, named)):
        image = named
    image = image or options.vm
    if not image:
        raise ValueError("no VM image: pass --adare-vm=IMAGE or adare_vm(image=...)")
    isolation = _marker_choice(kwargs.pop("isolation", options.isolation), ISOLATIONS, "isolation")
    os_name = kwargs.pop("os", None)
    if os_name is not None:
        os_name = _marker_choice(os_name, OS_NAMES, "os")
    gui = kwargs.pop("gui", None)
    if gui is not None and not isinstance(gui, (bool, str)):
        raise ValueError(
            f"adare_vm marker: gui must be True, False, 'auto', 'agent' or 'host', got {gui!r}"
        )
    if isinstance(gui, str):  # a mode is a need and the VM's GUI backend; True only a need
        kwargs["gui"] = _marker_choice(gui, GUI_MODES, "gui")
    given = dict(options.given)
    vm_options = _marker_vm_options()
    for key, value in kwargs.items():
        option = vm_options[key]
        if value is None:
            if option.default is None:
                given[option.field] = None
            continue
        try:
            given[option.field] = option.parse(value)
        except ValueError as error:
            raise ValueError(f"adare_vm marker: {key}: {error}") from None
    try:
        resolved = VMOptions.from_given(given)
    except ValueError as error:
        raise ValueError(f"adare_vm marker: {error}") from None
    writable = [str(share) for share in writable_shares(resolved.share)]
    if writable and isolation == "snapshot":
        raise ValueError(
            f"adare_vm marker: isolation: a writable share ({', '.join(writable)}) cannot be "
            "rolled back between tests (QEMU cannot save a VM with a virtiofs device, and "
            "the host folder keeps what was written): use isolation='reboot' or 'none'"
        )
    return VMRequest(
        image=str(image),
        options=resolved,
        isolation=isolation,
        needs_desktop=bool(gui),
        needs_os=os_name,
    )


def session_request(options: AdareOptions, image: str | None = None) -> VMRequest:
    """The session VM's request (no marker), on ``image`` of the matrix (default: the
    first)."""
    return apply_marker(options, None, image)


def _marker_choice(value: Any, choices: tuple[C, ...], key: str) -> C:
    for choice in choices:
        if value == choice:
            return choice
    raise ValueError(f"adare_vm marker: {key}: {value!r} is not one of {', '.join(choices)}")
