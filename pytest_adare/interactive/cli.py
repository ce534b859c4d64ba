"""``adare-vm``: boot an image and step inside; list, enter, watch and stop running VMs.

::

    adare-vm run debian                 # boot, a shell inside; leaving it stops the VM
    adare-vm run debian --keep          # ... and the VM keeps running afterwards
    adare-vm list                       # this user's VMs: name, image, run, since, owner, screen
    adare-vm shell vm0 [-- CMD ...]     # a shell (or run CMD: its output and status)
    adare-vm shell vm0 -- 'ls; df -h'   # one argument: a shell command line (sh -c)
    adare-vm screen vm0 shot.png        # the screen as PNG
    adare-vm stop vm0@4242              # vm0 alone when only one run has a vm0

docs/debugging.md shows the workflows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_adare.errors import AdareError
from pytest_adare.interactive import registry
from pytest_adare.interactive.client import OwnerError, print_json, request, shell

DEFAULT_IDLE_STOP = 30.0
"""Minutes a kept VM runs with nobody in it before its keeper stops it."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adare-vm", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="boot IMAGE and open a shell in it")
    run.add_argument("image", help="built-in name, manifest, disk image or recipe")
    run.add_argument("--memory", type=int, metavar="MIB", help="guest memory in MiB")
    run.add_argument("--cpus", type=int, help="virtual CPUs")
    run.add_argument("--transport", choices=["websocket", "serial"], help="agent transport")
    run.add_argument("--user", help="open the shell as this guest user (default: root)")
    run.add_argument("--keep", action="store_true", help="keep the VM running afterwards")
    run.add_argument(
        "--idle-stop",
        type=float,
        default=DEFAULT_IDLE_STOP,
        metavar="MINUTES",
        help=f"stop a kept VM nobody used for this long (default {DEFAULT_IDLE_STOP:g})",
    )
    listing = commands.add_parser("list", help="this user's running VMs")
    listing.add_argument("--json", action="store_true", help="as JSON")
    enter = commands.add_parser("shell", help="a shell in NAME, or run CMD after --")
    enter.add_argument("name")
    enter.add_argument("--user", help="as this guest user (default: root)")
    # What follows ``--`` is split off before parsing (main): argparse's REMAINDER took
    # options after NAME (``shell vm0 --user u``) as the command, and its "*" drops
    # every ``--`` of the command's own arguments.
    enter.add_argument(
        "cmd", nargs="*", help="-- CMD ...: run it and exit (one argument: a sh -c command line)"
    )
    stop = commands.add_parser("stop", help="stop NAME")
    stop.add_argument("name")
    screen = commands.add_parser("screen", help="write NAME's screen as a PNG")
    screen.add_argument("name")
    screen.add_argument("png", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``adare-vm`` console script."""
    parser = _parser()
    words = list(sys.argv[1:] if argv is None else argv)
    command_words: list[str] = []
    if "--" in words:
        at = words.index("--")
        words, command_words = words[:at], words[at + 1 :]
    args = parser.parse_args(words)
    if command_words and args.command != "shell":
        parser.error(f"only shell runs a command after --, not {args.command}")
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "list":
            return _list(args)
        entry = registry.find(args.name)
        if args.command == "shell":
            command = [*args.cmd, *command_words]
            return asyncio.run(shell(entry.socket, command or None, user=args.user))
        if args.command == "stop":
            asyncio.run(request(entry.socket, "stop"))
            print(f"adare-vm: {entry.name} stopping", file=sys.stderr)
            return 0
        _kind, png = asyncio.run(request(entry.socket, "screen"))
        args.png.write_bytes(png)
        print(f"adare-vm: {entry.name}'s screen in {args.png}", file=sys.stderr)
        return 0
    except (AdareError, OwnerError, OSError) as exc:
        print(f"adare-vm: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _list(args: argparse.Namespace) -> int:
    found = registry.entries()
    if args.json:
        print_rows: list[dict[str, Any]] = [
            {
                "name": e.name,
                "image": e.image,
                "run": e.run,
                "since": e.since,
                "owner": e.owner,
                "screen": f"adare-vm screen {e.name} FILE.png",
            }
            for e in found
        ]
        print_json(print_rows)
        return 0
    if not found:
        print("no running VMs (adare-vm run IMAGE boots one)")
        return 0
    rows = [("NAME", "IMAGE", "RUN", "SINCE", "OWNER", "SCREEN")]
    for e in found:
        since = dt.datetime.fromtimestamp(e.since).strftime("%H:%M:%S")
        rows.append((e.name, e.image, e.run, since, e.owner, f"adare-vm screen {e.name} FILE.png"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]))
    return 0


def _launch_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if args.memory is not None:
        options["memory_mib"] = args.memory
    if args.cpus is not None:
        options["cpus"] = args.cpus
    if args.transport is not None:
        options["transport"] = args.transport
    return options


def _run(args: argparse.Namespace) -> int:
    if args.idle_stop <= 0:
        raise AdareError(f"--idle-stop must be positive, got {args.idle_stop:g}")
    if args.keep:
        return _run_kept(args)
    # Deferred: booting needs the whole runtime; list/shell/stop need none of it.
    from pytest_adare.interactive.reach import register
    from pytest_adare.launch import launch

    with launch(args.image, **_launch_options(args)) as vm:
        registration = register(
            vm,
            base="vm",
            image=args.image,
            owner=f"adare-vm run (pid {os.getpid()})",
            on_stop=lambda: threading.Thread(target=vm.close, daemon=True).start(),
        )
        print(f"adare: {registration.hint()}", file=sys.stderr, flush=True)
        try:
            return asyncio.run(shell(registration.entry.socket, user=args.user))
        finally:
            registration.close()


def _run_kept(args: argparse.Namespace) -> int:
    """Boot in a detached keeper (forked before any thread exists), then enter it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            code = _keeper(args, write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    name = None
    with os.fdopen(read_end, "r") as progress:
        for line in progress:
            if line.startswith("READY "):
                name = line.split()[1]
                break
            sys.stderr.write(line)
            sys.stderr.flush()
    if name is None:
        os.waitpid(pid, 0)
        print("adare-vm: the VM did not start (see above)", file=sys.stderr)
        return 1
    print(f"adare: adare-vm shell {name}    (kept; adare-vm stop {name})", file=sys.stderr)
    code = asyncio.run(shell(registry.find(name).socket, user=args.user))
    print(
        f"adare: {name} keeps running (stopped after {args.idle_stop:g} min unused): "
        f"adare-vm shell {name}; adare-vm stop {name}",
        file=sys.stderr,
    )
    return code


def _keeper(args: argparse.Namespace, progress_fd: int) -> int:
    """The keeper process: owns the kept VM, serves it, stops it when asked or idle."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(progress_fd, 1)
    os.dup2(progress_fd, 2)
    # Deferred: booting needs the whole runtime; list/shell/stop need none of it.
    from pytest_adare.interactive.keeper import announce, serve_until_idle
    from pytest_adare.interactive.reach import register
    from pytest_adare.launch import launch

    stop = threading.Event()
    with launch(args.image, **_launch_options(args)) as vm:
        registration = register(
            vm,
            base="vm",
            image=args.image,
            owner=f"adare-vm run --keep (keeper pid {os.getpid()})",
            on_stop=stop.set,
        )
        try:
            announce(registration.name, progress_fd)
            serve_until_idle(registration, stop, args.idle_stop)
        finally:
            registration.close()
    with contextlib.suppress(OSError):
        os.close(devnull)
    return 0


if __name__ == "__main__":
    sys.exit(main())
