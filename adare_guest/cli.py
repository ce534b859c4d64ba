"""``python -m adare_guest [RUN_DIR] [--host H] [--port P] [--serial DEVICE] [--log-file F]``.

Also the entry point of the ``adare-guest`` script and of the zip bundle
(``python3 bundle.pyz RUN_DIR ...``). Flags win over ``RUN_DIR/config.json``.
The token and environment values are never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import Sequence

from adare_guest import __version__
from adare_guest.config import AgentConfig, ConfigError, default_run_dir, load_config
from adare_guest.identity import bundle_hash
from adare_guest.server import AdareVMServer

log = logging.getLogger("adare_guest")
BIND_RETRY_SECONDS = 5.0


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
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


async def run_agent(config: AgentConfig) -> None:
    """Serve WebSocket (and the serial link when configured) until cancelled."""
    server = AdareVMServer(config)
    jobs = []
    if config.serial_device:
        # Imported here: without pyserial the WebSocket side must still run.
        try:
            serial_transport = importlib.import_module("adare_guest.serial_transport")
        except ImportError as exc:
            server.record_error(f"serial transport unavailable: {exc}")
        else:
            transport = serial_transport.SerialTransport(server, config.serial_device)
            jobs.append(transport.serve())
        jobs.append(server.serve(retry_bind=BIND_RETRY_SECONDS))
    else:
        jobs.append(server.serve())
    await asyncio.gather(*jobs)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; returns the process exit code."""
    args = build_parser().parse_args(argv)
    overrides = {
        "host": args.host,
        "port": args.port,
        "serial_device": args.serial_device,
        "logfile": args.logfile,
        "log_level": args.log_level,
    }
    try:
        config = load_config(args.run_dir, overrides)
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
    return _run(config)


def _run(config: AgentConfig) -> int:
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
