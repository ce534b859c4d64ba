"""The agent's configuration: ``RUN_DIR/config.json`` plus command-line overrides.

Keys (DESIGN §3): ``host`` (default ``0.0.0.0``), ``port`` (18765), ``token``,
``logfile``, ``log_level``, ``tools_paths`` (appended to PATH for shell
commands), ``data_paths``, ``serial_device``, and ``insecure_listen_any``
(default false). Overrides (command-line flags) win over the file. A missing
``config.json`` means defaults; a broken one is a :class:`ConfigError` naming the
file and the key.

Secure by default: without a ``token`` the agent listens on ``127.0.0.1`` only,
whatever ``host`` says, unless ``insecure_listen_any`` is set (see
:func:`listen_host`). ``config.json`` holds the token, so a copy readable by group
or others is tightened to 0600 when it is read (:func:`protect_config_file`).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PORT = 18765
VIRTIO_PORT_NAME = "org.adare.agent.0"
"""The virtio-serial port of the agent's serial link (``/dev/virtio-ports/<name>``)."""
DEFAULT_HOST = "0.0.0.0"
LOOPBACK_HOST = "127.0.0.1"
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
    insecure_listen_any: bool = False
    """Serve ``host`` as given even without a token (anyone who reaches it is root)."""
    run_dir: Path = field(default_factory=default_run_dir)
    ignored_keys: list[str] = field(default_factory=list)
    """Keys of config.json this agent does not know (reported in the log, not fatal)."""
    notices: list[str] = field(default_factory=list)
    """Warnings found while loading (e.g. a config.json others could read), for the log."""

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
        elif key == "insecure_listen_any":
            if not isinstance(value, bool):
                raise ConfigError(f"'insecure_listen_any' must be true or false, got {value!r}")
            config.insecure_listen_any = value
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
    notice = protect_config_file(config_path)
    if notice:
        config.notices.append(notice)
    if overrides:
        try:
            _apply(config, {k: v for k, v in overrides.items() if v is not None})
        except ConfigError as exc:
            raise ConfigError(f"command line: {exc}") from None
    return config


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback address (``127.x.y.z``, ``::1``, ``localhost``)?"""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def listen_host(config: AgentConfig) -> tuple[str, str | None]:
    """The address to bind and, when it differs from the configured one, a warning.

    With a token the configured ``host`` is used. Without one the agent executes
    anything for anyone who can connect, so it binds :data:`LOOPBACK_HOST` only,
    unless ``insecure_listen_any`` says otherwise.
    """
    if config.token:
        return config.host, None
    if config.insecure_listen_any:
        return config.host, (
            f"no token and insecure_listen_any: anyone who can reach {config.host}:"
            f"{config.port} can run commands as this agent's user"
        )
    if is_loopback(config.host):
        return config.host, f"no token configured: listening on {config.host} only"
    return LOOPBACK_HOST, (
        f"no token configured: listening on {LOOPBACK_HOST} only instead of {config.host} "
        "(set a token, or --insecure-listen-any to serve other addresses without one)"
    )


def protect_config_file(path: Path) -> str | None:
    """Make ``path`` (holding the token) readable by its owner only; a notice saying
    what was done or could not be done, or None when it was already private or absent."""
    if sys.platform == "win32":
        return None
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    if not mode & 0o077:
        return None
    try:
        os.chmod(path, mode & 0o700)
    except OSError as exc:
        return f"{path} is readable by others (mode {mode:04o}) and cannot be tightened: {exc}"
    return f"{path} was readable by others (mode {mode:04o}); tightened to {mode & 0o700:04o}"
