"""Several libvirt hypervisors for one run: which one this process's VMs go to.

``--adare-hypervisor=URI1,URI2`` (or ``@FILE``, one URI per line, ``#`` comments)
names the hosts; under ``-n N`` worker ``gwK`` takes the (K mod hosts)-th, so workers
spread evenly and each one stays on one host. ``--adare-hypervisor-limit=M`` is the
most VMs (workers) one host takes: more workers than hosts x M is a usage error before
anything starts. Pure: no libvirt here, the plugin's options call it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest


def parse_hypervisors(value: str, base: Path, source: str) -> tuple[str, ...]:
    """The URIs of ``URI[,URI...]`` or ``@FILE`` (relative to ``base``).

    :raise pytest.UsageError: no URI, a line that is not a URI, or an unreadable file.
    """
    text = value.strip()
    if text.startswith("@"):
        path = base / text[1:]
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise pytest.UsageError(f"{source}: cannot read {path}: {exc.strerror}") from None
        entries = [line.split("#", 1)[0] for line in lines]
    else:
        entries = text.split(",")
    uris = tuple(entry.strip() for entry in entries if entry.strip())
    bad = [uri for uri in uris if "://" not in uri or any(c.isspace() for c in uri)]
    if not uris or bad:
        raise pytest.UsageError(
            f"{source}: expected libvirt URIs like qemu:///system or "
            f"qemu+ssh://user@host/system, got {(bad or [text])[0]!r}"
        )
    return uris


def assign_hypervisor(
    uris: tuple[str, ...], worker: int | None, workers: int | None, limit: int | None
) -> str:
    """The URI for worker ``worker`` of ``workers`` (None, None: no xdist).

    :raise pytest.UsageError: ``workers`` exceeds ``len(uris) * limit``.
    """
    if limit is not None and workers is not None and workers > len(uris) * limit:
        raise pytest.UsageError(
            f"-n {workers} needs {workers} VM slots, but {len(uris)} hypervisor(s) x "
            f"--adare-hypervisor-limit={limit} give {len(uris) * limit}"
        )
    return uris[0 if worker is None else worker % len(uris)]


def workers_per_host(uris: tuple[str, ...], workers: int | None) -> dict[str, int]:
    """How many workers (VM owners) each URI gets: the session header's list."""
    counts = Counter(uris[index % len(uris)] for index in range(workers or 1))
    return {uri: counts[uri] for uri in uris}


def worker_of(config: pytest.Config) -> tuple[int | None, int | None]:
    """This process's xdist worker index and the worker count: (None, N) in xdist's
    controller (``-n N``), (None, None) without xdist."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput:
        workers = config.getoption("numprocesses", None)
        return None, workers if isinstance(workers, int) and workers > 0 else None
    return int(str(workerinput["workerid"]).lstrip("gw")), int(workerinput["workercount"])


def parse_limit(value: str, source: str) -> int:
    """A positive VM count per host. :raise pytest.UsageError: otherwise."""
    try:
        limit = int(value)
    except ValueError:
        raise pytest.UsageError(f"{source}: expected a number of VMs, got {value!r}") from None
    if limit < 1:
        raise pytest.UsageError(f"{source}: expected at least 1 VM per host, got {limit}")
    return limit
