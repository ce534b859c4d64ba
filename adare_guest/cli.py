"""``python -m adare_guest [RUN_DIR] [--host H] [--port P] [--serial DEVICE] [--log-file F]``.

Also the entry point of the ``adare-guest`` script and of the zip bundle
(``python3 bundle.pyz RUN_DIR ...``). Flags win over ``RUN_DIR/config.json``.
The token and environment values are never logged.

Start-up is on the critical path of every VM boot (a guest under TCG imports
~20x slower than the host), so this module imports only what serving needs:
``argparse`` only for command lines beyond the plain ``RUN_DIR --opt VALUE``
form (``--insecure-listen-any`` is one of those), and the serial transport
(pyserial) only after the WebSocket listener is bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adare_guest import __version__
from adare_guest.config import AgentConfig, ConfigError, default_run_dir, load_config
from adare_guest.identity import bundle_hash

if TYPE_CHECKING:
    import argparse

    from adare_guest.server import AdareVMServer

log = logging.getLogger("adare_guest")
BIND_RETRY_SECONDS = 5.0
FIRST_BIND_WAIT_SECONDS = 2.0
"""How long the serial link waits for the WebSocket listener's first bind attempt."""
_OPTIONS = {
    "--host": "host",
    "--port": "port",
    "--serial": "serial_device",
    "--log-file": "logfile",
    "--log-level": "log_level",
}


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    # Deferred: start-up parses plain command lines without argparse (module docstring).
    import argparse

    parser = argparse.ArgumentParser(
        prog="adare-guest", description="pytest-adare guest agent (WebSocket + serial)."
    )
    parser.add_argument(
        "run_dir",
        nargs="?",
        default=None,
        help=f"directory holding config.json (default {default_run_dir()})",
    )
    parser.add_argument("--host", help="listen address (default from config, else 0.0.0.0)")
    parser.add_argument("--port", type=int, help="listen port (default from config, else 18765)")
    parser.add_argument("--serial", dest="serial_device", help="serve the DV serial link here")
    parser.add_argument("--log-file", dest="logfile", help="log file (default from config)")
    parser.add_argument("--log-level", dest="log_level", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument(
        "--insecure-listen-any",
        dest="insecure_listen_any",
        action="store_true",
        default=None,
        help="without a token, still listen on --host (default: 127.0.0.1 only)",
    )
    parser.add_argument("--version", action="version", version=f"adare-guest {__version__}")
    return parser


def configure_logging(config: AgentConfig) -> None:
    """Log to ``config.logfile`` (stderr when unset or unwritable) at ``config.log_level``."""
    handler: logging.Handler
    fallback_reason = None
    if config.logfile:
        try:
            handler = logging.FileHandler(config.logfile, encoding="utf-8")
        except OSError as exc:
            handler = logging.StreamHandler(sys.stderr)
            fallback_reason = f"cannot open log file {config.logfile}: {exc}"
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level_number)
    if fallback_reason:
        log.warning("%s; logging to stderr", fallback_reason)


def parse_simple_args(argv: Sequence[str]) -> dict[str, Any] | None:
    """The parsed values of a plain command line (``[RUN_DIR] [--opt VALUE]...``), or
    None when ``argv`` needs the full parser (``--opt=VALUE``, abbreviations, repeats,
    ``--help``, values starting with ``-``, a non-integer port...).

    Where it answers, the answer equals :func:`build_parser`'s (tested); it exists
    because importing ``argparse`` costs a slow guest a noticeable part of a second.
    """
    values: dict[str, Any] = {"run_dir": None, **dict.fromkeys(_OPTIONS.values())}
    values["insecure_listen_any"] = None  # a flag: only the full parser takes it
    seen: set[str] = set()
    index = 0
    while index < len(argv):
        token = argv[index]
        if token in _OPTIONS:
            key = _OPTIONS[token]
            if key in seen or index + 1 >= len(argv) or argv[index + 1].startswith("-"):
                return None
            values[key] = argv[index + 1]
            seen.add(key)
            index += 2
        elif token.startswith("-") or "run_dir" in seen:
            return None
        else:
            values["run_dir"] = token
            seen.add("run_dir")
            index += 1
    if values["port"] is not None:
        try:
            values["port"] = int(values["port"])
        except ValueError:
            return None
    return values


def parse_args(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``run_dir``, ``host``, ``port``, ``serial_device``, ``logfile``, ``log_level``
    from ``argv`` (default ``sys.argv[1:]``); exits like argparse on bad input."""
    args = list(sys.argv[1:] if argv is None else argv)
    simple = parse_simple_args(args)
    if simple is not None:
        return simple
    return dict(vars(build_parser().parse_args(args)))


async def run_agent(config: AgentConfig) -> None:
    """Serve WebSocket (and the serial link when configured) until cancelled.

    The WebSocket listener is bound first; the serial transport (and pyserial) is
    loaded after its first bind attempt, so a slow guest answers on the network sooner.
    """
    # Deferred: the server and its tools load only when serving, not for --help or parsing.
    from adare_guest.server import AdareVMServer

    server = AdareVMServer(config)
    if not config.serial_device:
        await server.serve()
        return
    web = asyncio.ensure_future(server.serve(retry_bind=BIND_RETRY_SECONDS))
    try:
        await _await_first_bind(server, web, FIRST_BIND_WAIT_SECONDS)
        jobs: list[Any] = [web]
        serial_job = _serial_job(server, config.serial_device)
        if serial_job is not None:
            jobs.append(serial_job)
        await asyncio.gather(*jobs)
    finally:
        if not web.done():
            web.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await web


async def _await_first_bind(server: AdareVMServer, web: asyncio.Future[None], limit: float) -> None:
    """Wait (at most ``limit`` s) until the listener is bound or its bind failed once."""
    error_before = server.last_error
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not (server.listening or web.done() or server.last_error != error_before):
        if loop.time() >= deadline:
            log.warning("WebSocket listener not bound after %.1f s; starting serial", limit)
            return
        await asyncio.sleep(0.005)


def _serial_job(server: AdareVMServer, device: str) -> Any:
    # Imported here: without pyserial the WebSocket side must still run.
    try:
        serial_transport = importlib.import_module("adare_guest.serial.transport")
    except ImportError as exc:
        server.record_error(f"serial transport unavailable: {exc}")
        return None
    return serial_transport.SerialTransport(server, device).serve()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; returns the process exit code."""
    args = parse_args(argv)
    overrides = {key: args[key] for key in _OPTIONS.values()}
    overrides["insecure_listen_any"] = args.get("insecure_listen_any")
    try:
        config = load_config(args["run_dir"], overrides)
    except ConfigError as exc:
        print(f"adare-guest: bad configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(config)
    log.info(
        "adare-guest %s (bundle %s) starting: run_dir=%s host=%s port=%d serial=%s token=%s",
        __version__,
        bundle_hash()[:12],
        config.run_dir,
        config.host,
        config.port,
        config.serial_device or "-",
        "set" if config.token else "none",
    )
    if config.ignored_keys:
        log.warning("config.json keys ignored (unknown): %s", ", ".join(config.ignored_keys))
    for notice in config.notices:
        log.warning("%s", notice)
    return _run(config)


def _run(config: AgentConfig) -> int:
    if sys.platform != "win32":
        # Started by nohup or in a script's background, the agent ignores SIGINT and
        # SIGQUIT; what it starts would inherit that (exec keeps an ignored signal).
        for signum in (signal.SIGINT, signal.SIGQUIT):
            if signal.getsignal(signum) == signal.SIG_IGN:
                signal.signal(signum, signal.SIG_DFL)
    loop = asyncio.new_event_loop()
    task = loop.create_task(run_agent(config))
    if sys.platform != "win32":
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        log.info("stopped by signal")
        return 0
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        log.error("agent failed: %s", exc)
        return 1
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return 0
