"""The agent's configuration: ``RUN_DIR/config.json`` plus command-line overrides.

Keys (DESIGN §3): ``host`` (default ``0.0.0.0``), ``port`` (18765), ``token``,
``logfile``, ``log_level``, ``tools_paths`` (appended to PATH for shell
commands), ``data_paths``, ``serial_device``. Overrides (command-line flags) win
over the file. A missing ``config.json`` means defaults; a broken one is a
:class:`ConfigError` naming the file and the key.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PORT = 18765
DEFAULT_HOST = "0.0.0.0"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def default_run_dir() -> Path:
    """``/adare/run`` (``C:\\adare\\run`` on Windows)."""
    return Path("C:\\adare\\run") if sys.platform == "win32" else Path("/adare/run")


class ConfigError(ValueError):
    """``config.json`` or an override is unusable; the message says which key and why."""


@dataclass
class AgentConfig:
    """Everything the agent needs to know about its run. ``token`` is never shown in repr."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = field(default=None, repr=False)
    logfile: str | None = None
    log_level: str = "INFO"
    tools_paths: list[str] = field(default_factory=list)
    data_paths: list[str] = field(default_factory=list)
    serial_device: str | None = None
    run_dir: Path = field(default_factory=default_run_dir)
    ignored_keys: list[str] = field(default_factory=list)
    """Keys of config.json this agent does not know (reported in the log, not fatal)."""

    @property
    def log_level_number(self) -> int:
        """The :mod:`logging` level number of ``log_level``."""
        return int(getattr(logging, self.log_level))


def _as_str(key: str, value: Any, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{key!r} must be a string, got {type(value).__name__}")
    return value


def _as_port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"'port' must be an integer 0..65535, got {value!r}")
    return value


def _as_paths(key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        value = list(value.values())
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"{key!r} must be a list of path strings, got {value!r}")
    return list(value)


def _as_level(value: Any) -> str:
    if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
        raise ConfigError(f"'log_level' must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.upper()


def _apply(config: AgentConfig, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key == "host":
            config.host = _as_str(key, value, optional=False) or DEFAULT_HOST
        elif key == "port":
            config.port = _as_port(value)
        elif key == "token":
            config.token = _as_str(key, value, optional=True) or None
        elif key in ("logfile", "serial_device"):
            setattr(config, key, _as_str(key, value, optional=True) or None)
        elif key == "log_level":
            config.log_level = _as_level(value)
        elif key in ("tools_paths", "data_paths"):
            setattr(config, key, _as_paths(key, value))
        else:
            config.ignored_keys.append(str(key))


def read_config_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` ({} when the file does not exist).

    :raise ConfigError: unreadable file, invalid JSON or not an object.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def load_config(
    run_dir: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> AgentConfig:
    """Read ``run_dir/config.json`` (defaults when absent) and apply ``overrides``.

    Overrides whose value is None are ignored (a flag that was not given).

    :raise ConfigError: the file or an override has a bad value (message names the key).
    """
    directory = Path(run_dir) if run_dir is not None else default_run_dir()
    config = AgentConfig(run_dir=directory)
    config_path = directory / "config.json"
    try:
        _apply(config, read_config_file(config_path))
    except ConfigError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    if overrides:
        try:
            _apply(config, {k: v for k, v in overrides.items() if v is not None})
        except ConfigError as exc:
            raise ConfigError(f"command line: {exc}") from None
    return config
