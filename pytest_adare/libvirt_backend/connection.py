"""Opening a libvirt URI, with ``libvirt`` imported on first use and errors in one line.

``libvirt-python`` is the optional extra ``libvirt``; without it, or when the URI cannot
be reached, the VM fails with one :class:`~pytest_adare.errors.AdareError` line naming
what to do.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pytest_adare.errors import AdareError, VMLaunchError

INSTALL_HINT = "python -m pip install 'pytest-adare[libvirt]'"


class HypervisorError(VMLaunchError):
    """The hypervisor, its storage pool or a domain failed to start: libvirt's reason in
    one line (a :class:`VMLaunchError`, so the plugin counts it as infrastructure)."""

    def __init__(self, message: str) -> None:
        self.exitcode = None
        self.command = []
        self.output = ""
        AdareError.__init__(self, message)


@functools.cache
def libvirt_module() -> Any:
    """The ``libvirt`` module, its default error printer silenced (errors are raised).

    :raise AdareError: libvirt-python is not installed (the line says how to get it).
    """
    try:
        # Deferred: libvirt-python is an optional extra, loaded only for a libvirt URI.
        import libvirt
    except ImportError as exc:
        raise AdareError(
            f"--adare-hypervisor needs the libvirt-python package ({exc}): {INSTALL_HINT}"
        ) from None
    libvirt.registerErrorHandler(_ignore_error, None)
    return libvirt


def _ignore_error(context: object, error: object) -> None:
    """libvirt prints every error to stderr unless a handler is set; ours are raised."""


_event_loop_lock = threading.Lock()
_event_loop: threading.Thread | None = None


def ensure_event_loop() -> None:
    """libvirt's default event loop, run by one daemon thread (started once, before the
    first connection: streams, keepalives and callbacks need it)."""
    global _event_loop
    libvirt = libvirt_module()
    with _event_loop_lock:
        if _event_loop is not None:
            return
        libvirt.virEventRegisterDefaultImpl()
        _event_loop = threading.Thread(target=_run_events, name="libvirt events", daemon=True)
        _event_loop.start()


def _run_events() -> None:
    libvirt = libvirt_module()
    while True:
        libvirt.virEventRunDefaultImpl()


def on_event_thread(function: Callable[[], None]) -> None:
    """Run ``function`` soon on libvirt's event thread (a one-shot zero timer)."""
    libvirt = libvirt_module()
    ensure_event_loop()

    def fire(timer: int, opaque: object) -> None:
        libvirt.virEventRemoveTimeout(timer)
        function()

    libvirt.virEventAddTimeout(0, fire, None)


KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 6
"""A hypervisor silent for 5 s x 6 probes counts as gone (its connection is closed)."""


def libvirt_qemu_module() -> Any:
    """``libvirt_qemu`` (QMP/HMP passthrough), from the same package."""
    libvirt_module()
    # Deferred: part of the optional libvirt-python package, like libvirt itself.
    import libvirt_qemu

    return libvirt_qemu


def open_connection(uri: str) -> Any:
    """A ``virConnect`` to ``uri``.

    :raise VMLaunchError: the hypervisor cannot be reached (one line: the URI and why).
    """
    libvirt = libvirt_module()
    ensure_event_loop()
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"cannot reach the hypervisor {uri}: {error_text(exc)}") from None
    if not is_local(uri):
        with contextlib.suppress(libvirt.libvirtError):
            conn.setKeepAlive(KEEPALIVE_INTERVAL, KEEPALIVE_COUNT)
    return conn


def error_text(exc: BaseException) -> str:
    """libvirt's own message for ``exc`` on one line."""
    text = exc.get_error_message() if hasattr(exc, "get_error_message") else str(exc)
    return " ".join(str(text or exc).split())


def is_local(uri: str) -> bool:
    """True for a URI naming this machine's daemon (``qemu:///system``, ``qemu:///session``):
    no host, or a loopback host without a remote transport."""
    parts = urlsplit(uri)
    return not parts.hostname and "+" not in parts.scheme


def is_session(uri: str) -> bool:
    """True for a user's own daemon on this machine (``qemu:///session``)."""
    return is_local(uri) and urlsplit(uri).path.rstrip("/") == "/session"
