"""The image manifest (``adare-image.json``): reading, validating, writing (a leaf).

An image is a directory with a manifest naming a disk and, for direct kernel
boot, a kernel, an initrd and the kernel command line; plus what the host must
know about the guest (OS, where the agent's serial port is, whether a desktop
runs and at which resolution). Paths in the file are relative to the
manifest's directory; :func:`load_manifest` makes them absolute.

How a user's ``--adare-vm`` becomes a manifest is :mod:`pytest_adare.image.resolve`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from dataclasses import fields as fields_of
from pathlib import Path
from typing import Any

from pytest_adare.errors import ImageError
from pytest_adare.image.partition_table import FIRMWARES, Firmware
from pytest_adare.vm_options import ready_command_problem

MANIFEST_NAME = "adare-image.json"
DISK_FORMATS = ("qcow2", "raw", "vmdk", "vdi", "vhdx", "vpc")
"""Formats QEMU reads as the overlay's backing file (``qemu-img info`` names them so)."""
OS_NAMES = ("linux", "windows")
BUILTIN_IMAGES = ("debian", "debian-desktop", "debian-systemd", "debian-xfce")
DEFAULT_MEMORY_MIB = 512

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AgentSpec:
    """What the host must know about the agent inside the image."""

    serial_device: str = "/dev/ttyS1"
    baked: bool = False
    version: str | None = None
    bundle_hash: str | None = None
    run_dir: str = "/adare/run"
    fw_cfg: bool = False
    initrd_handoff: bool = False
    """The image's initrd takes ``/handoff/{config.json,bundle.pyz}`` (see ``handoff_initrd``)."""


@dataclass(frozen=True)
class ImageManifest:
    """A guest image. ``disk``, ``kernel`` and ``initrd`` are absolute after loading."""

    name: str
    disk: Path
    format: str = "qcow2"
    kernel: Path | None = None
    initrd: Path | None = None
    append: str | None = None
    os: str = "linux"
    arch: str = "x86_64"
    agent: AgentSpec = field(default_factory=AgentSpec)
    desktop: bool = False
    display: tuple[int, int] | None = None
    memory_mib: int = DEFAULT_MEMORY_MIB
    disk_sha256: str | None = None
    recipe_hash: str | None = None
    built_at: str | None = None
    firmware: Firmware = "bios"
    """What boots the disk when there is no ``kernel``: SeaBIOS or OVMF (UEFI)."""
    ready_command: str | None = None
    """A guest shell command that exits 0 once the guest is ready for tests (see
    ``VMOptions.ready_command``, which overrides it)."""
    user: str | None = None
    """The guest's desktop user (``guest.user``); None: the one whose session runs, else root."""
    base_sha256: str | None = None
    """An image built from a recipe: the sha256 of the disk it extends (None when the steps
    went in when its root file system was made)."""
    steps: dict[str, Any] | None = None
    """An image built from a recipe: what the recipe did (install, files, provision)."""
    path: Path | None = None
    """Where the manifest was loaded from (None for a bare disk)."""
    firmware_reason: str = field(default="", compare=False)
    """Why ``firmware`` (read from the manifest, or from a bare disk's partition table)."""

    @property
    def direct_boot(self) -> bool:
        """True when QEMU boots ``kernel`` directly instead of the disk's firmware boot."""
        return self.kernel is not None

    def to_json(self) -> dict[str, Any]:
        """The manifest as written to disk (paths relative to ``base``'s directory)."""
        base = self.disk.parent if self.path is None else self.path.parent
        data = asdict(self)
        del data["path"], data["firmware_reason"]
        for key in ("disk", "kernel", "initrd"):
            value = getattr(self, key)
            data[key] = None if value is None else _relative(value, base)
        data["display"] = list(self.display) if self.display else None
        return data


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def write_manifest(manifest: ImageManifest, path: Path) -> Path:
    """Write ``manifest`` to ``path`` (a file, or a directory that gets ``adare-image.json``)."""
    if path.is_dir():
        path = path / MANIFEST_NAME
    data = replace(manifest, path=path).to_json()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


class _Fields:
    """Typed access to a JSON object; every error names the field and the file."""

    def __init__(self, data: Mapping[str, Any], source: Path, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> ImageError:
        return ImageError(f"{self.source}: field '{self.prefix}{key}' {problem}")

    def get(
        self,
        key: str,
        kind: type | tuple[type, ...],
        default: Any = ...,
        *,
        choices: tuple[str, ...] = (),
    ) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.fail(key, "is missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) and kind is not bool and bool not in _tuple(kind):
            raise self.fail(key, f"must be {_kind_name(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise self.fail(key, f"must be {_kind_name(kind)}, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def path(self, key: str, required: bool = False) -> Path | None:
        value: str | None = self.get(key, str) if required else self.get(key, str, None)
        if value is None:
            return None
        resolved = (self.source.parent / value).resolve()
        if not resolved.is_file():
            raise self.fail(key, f"names {resolved}, which does not exist")
        return resolved


def _ready_command_from(fields: _Fields) -> str | None:
    command: str | None = fields.get("ready_command", str, None)
    if command is not None and (problem := ready_command_problem(command)):
        raise fields.fail("ready_command", problem)
    return command


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        str: "a string",
        bool: "true or false",
        int: "an integer",
        dict: "an object",
        list: "a list",
    }
    return " or ".join(names.get(k, k.__name__) for k in _tuple(kind))


def _refuse_unknown(data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in known:
            raise ImageError(
                f"{where}unknown field {key!r} (known: {', '.join(sorted(known))})"
            )


_AGENT_KEYS = tuple(f.name for f in fields_of(AgentSpec))
_MANIFEST_KEYS = tuple(
    f.name for f in fields_of(ImageManifest) if f.name not in ("path", "firmware_reason")
)


def _agent_from(fields: _Fields) -> AgentSpec:
    raw = fields.get("agent", dict, {})
    _refuse_unknown(raw, _AGENT_KEYS, f"{fields.source}: in 'agent': ")
    agent = _Fields(raw, fields.source, "agent.")
    return AgentSpec(
        serial_device=agent.get("serial_device", str, AgentSpec.serial_device),
        baked=agent.get("baked", bool, False),
        version=agent.get("version", str, None),
        bundle_hash=agent.get("bundle_hash", str, None),
        run_dir=agent.get("run_dir", str, AgentSpec.run_dir),
        fw_cfg=agent.get("fw_cfg", bool, False),
        initrd_handoff=agent.get("initrd_handoff", bool, False),
    )


def _display_from(fields: _Fields, desktop: bool) -> tuple[int, int] | None:
    raw = fields.get("display", list, None)
    if raw is None:
        if desktop:
            raise fields.fail("display", "is missing (required when desktop is true)")
        return None
    if len(raw) != 2 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in raw
    ):
        raise fields.fail("display", f"must be [width, height] in pixels, got {raw!r}")
    return (raw[0], raw[1])


def load_manifest(path: str | Path) -> ImageManifest:
    """Read and validate a manifest file.

    :raise ImageError: the file is unreadable, not JSON, or a field is missing or wrong
        (the message names the field and the file).
    """
    source = Path(path).resolve()
    try:
        data = json.loads(source.read_text())
    except OSError as exc:
        raise ImageError(f"cannot read image manifest {source}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ImageError(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ImageError(f"{source}: a manifest must be a JSON object")
    _refuse_unknown(data, _MANIFEST_KEYS, f"{source}: ")
    fields = _Fields(data, source)
    desktop = fields.get("desktop", bool, False)
    memory = fields.get("memory_mib", int, DEFAULT_MEMORY_MIB)
    if memory < 64:
        raise fields.fail("memory_mib", f"must be at least 64, got {memory}")
    kernel = fields.path("kernel")
    initrd = fields.path("initrd")
    if initrd is not None and kernel is None:
        raise fields.fail("initrd", "is set but 'kernel' is not (an initrd needs a kernel)")
    disk = fields.path("disk", required=True)
    assert disk is not None
    return ImageManifest(
        name=fields.get("name", str, source.parent.name),
        disk=disk,
        format=fields.get("format", str, choices=DISK_FORMATS),
        kernel=kernel,
        initrd=initrd,
        append=fields.get("append", str, None),
        os=fields.get("os", str, "linux", choices=OS_NAMES),
        arch=fields.get("arch", str, "x86_64"),
        agent=_agent_from(fields),
        desktop=desktop,
        display=_display_from(fields, desktop),
        memory_mib=memory,
        disk_sha256=fields.get("disk_sha256", str, None),
        recipe_hash=fields.get("recipe_hash", str, None),
        built_at=fields.get("built_at", str, None),
        firmware=fields.get("firmware", str, "bios", choices=FIRMWARES),
        ready_command=_ready_command_from(fields),
        user=fields.get("user", str, None),
        base_sha256=fields.get("base_sha256", str, None),
        steps=fields.get("steps", dict, None),
        path=source,
        firmware_reason="from the manifest" if "firmware" in data else "the manifest's default",
    )
