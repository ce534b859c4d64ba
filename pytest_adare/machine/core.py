""":class:`MachineCore`: what every backend's machine shares, written once.

A backend subclass provides the hypervisor half (start, shutdown, the screen's PNG,
raw input, snapshots, …) and sets ``_console`` and ``_died`` while it runs; the core
holds the death state, the bounded waits, the console, typing and pointer moves over
raw input, and the sync face: each sync method is one
:func:`~pytest_adare.loop_thread.sync_twin` line over its async method (the machine is
its own async twin, ``aio``), run on :func:`~pytest_adare.loop_thread.shared_loop`.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_adare.errors import VMDied
from pytest_adare.loop_thread import SyncTwin, shared_loop, sync_twin
from pytest_adare.machine import input_events
from pytest_adare.machine.base import Capability, unsupported
from pytest_adare.machine.bounded_wait import bounded_wait
from pytest_adare.machine.console import ConsoleCapture

if TYPE_CHECKING:  # PIL is imported when a screen is first decoded
    from PIL import Image

T = TypeVar("T")
TYPE_KEY_INTERVAL = 0.03
"""Seconds between typed characters: the guest must drain the PS/2 queue in between."""


class MachineCore(SyncTwin["MachineCore"]):
    """The shared half of a machine (see the module docstring)."""

    backend = "?"
    name = "vm"
    type_key_interval = TYPE_KEY_INTERVAL
    _console: ConsoleCapture | None = None
    _died: asyncio.Event | None = None
    _death_reason: str | None = None

    @property
    def aio(self) -> MachineCore:  # type: ignore[override]
        """The machine itself: its async methods are what the sync face runs."""
        return self

    @staticmethod
    def _run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return shared_loop().run(coro, timeout)

    def _unsupported(self, capability: Capability) -> Exception:
        return unsupported(self.backend, capability)

    # ----------------------------------------------------------------- health
    def is_running(self) -> bool:
        raise NotImplementedError

    def _stopped(self) -> bool:
        """True once the hypervisor side is gone for good (no wait can succeed)."""
        return False

    def check_alive(self) -> None:
        """:raise VMDied: with the reason and the console tail, when not running."""
        if not self.is_running():
            raise VMDied(self._down_reason(), self.console_tail())

    def _down_reason(self) -> str:
        if self._died is None:
            return f"machine {self.name} not started"
        return self._death_reason or f"machine {self.name} was shut down"

    def _mark_dead(self, reason: str) -> None:
        if self._died is not None and not self._died.is_set():
            self._death_reason = reason
            self._died.set()

    async def bounded(self, coro: Awaitable[T], timeout: float, what: str) -> T:
        """Await ``coro`` for at most ``timeout`` s, ending at once if the machine dies.

        :raise VMDied: the hypervisor or the guest went away first.
        :raise VMTimeout: ``timeout`` passed; the message names ``what`` was awaited.
        """
        if self._died is None:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise VMDied(self._down_reason(), self.console_tail())
        return await bounded_wait(
            coro, timeout, what, died=self._died,
            death_reason=lambda: self._death_reason, console_tail=self.console_tail,
        )  # fmt: skip

    # ---------------------------------------------------------------- console
    def console_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` lines of the guest console."""
        return self._console.tail(n) if self._console is not None else []

    def console_mark(self) -> int:
        """Position in the console; pass as ``since`` to wait only for later output."""
        return self._console.mark() if self._console is not None else 0

    async def aseed_console(self, text: str) -> None:
        """Feed ``text`` to the console capture as if the guest had printed it (a warm
        start's saved boot lines, so failure reports still show how the guest booted)."""
        if self._console is not None:
            self._console.data_received(text.encode())

    async def await_for_console(
        self, pattern: str | re.Pattern[str], timeout: float, since: int = 0
    ) -> re.Match[str]:
        """Wait until a console line (or the current partial line) matches ``pattern``.

        Lines from ``since`` on count (default: everything still in the ring).

        :raise VMTimeout: nothing matched in ``timeout`` seconds.
        :raise VMDied: the guest shut down, panicked or its hypervisor went away first.
        """
        if self._console is None or self._died is None or self._stopped():
            raise VMDied(self._down_reason(), self.console_tail())
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        future = self._console.wait_for(regex, since)
        return await self.bounded(future, timeout, f"console output matching {regex.pattern!r}")

    # ---------------------------------------------------------- screen, input
    async def ascreendump_png(self, timeout: float = 30.0) -> bytes:
        """The guest's display as the hypervisor's PNG."""
        raise NotImplementedError

    async def ascreendump(self, timeout: float = 30.0) -> Image.Image:
        """The guest's display as a PIL image (RGB; needs a display)."""
        png = await self.ascreendump_png(timeout)
        return await asyncio.to_thread(_decode_image, png)

    async def asend_input(self, events: list[dict[str, Any]]) -> None:
        """Send raw input events (QEMU's ``input-send-event`` form, :mod:`.input_events`)."""
        raise NotImplementedError

    async def atype_text(self, text: str, key_interval: float | None = None) -> None:
        """Type ``text`` key by key on a US layout (shift where a character needs it).

        The emulated PS/2 keyboard buffers only 16 scancodes (about four characters) and
        drops what arrives while the guest has not read them, so characters are paced.
        """
        pause = self.type_key_interval if key_interval is None else key_interval
        for batch in input_events.text_events(text):
            await self.asend_input(batch)
            await asyncio.sleep(pause)

    async def asend_keys(self, *keys: str) -> None:
        """Press ``keys`` together and release them (``send_keys("ctrl", "alt", "t")``)."""
        await self.asend_input(input_events.key_events(keys))

    async def amouse_move(self, x: int, y: int, *, screen: tuple[int, int] | None = None) -> None:
        """Move the USB tablet pointer; ``x, y`` in 0..32767, or pixels of ``screen=(w, h)``."""
        if screen is not None:
            x = input_events.scale_to_abs(x, screen[0])
            y = input_events.scale_to_abs(y, screen[1])
        await self.asend_input(input_events.move_events(x, y))

    async def amouse_click(self, button: str = "left") -> None:
        """Press and release a pointer button where the pointer is."""
        down = input_events.button_events(button, True)
        await self.asend_input(down + input_events.button_events(button, False))

    # -------------------------------------------------------------- snapshots
    async def asavevm(self, tag: str, timeout: float = 120.0) -> None:
        """Save the whole VM state (RAM, devices, disk) under ``tag``."""
        raise NotImplementedError

    async def aloadvm(self, tag: str, timeout: float = 120.0) -> None:
        """Return the VM to the state saved under ``tag`` (it keeps running from there)."""
        raise NotImplementedError

    async def areset(self, timeout: float = 60.0) -> None:
        """Hard-reset the guest (power-cycle) while the hypervisor keeps running."""
        raise NotImplementedError

    # -------------------------------------------------------------- sync face
    wait_for_console = sync_twin(await_for_console)
    screendump = sync_twin(ascreendump)
    type_text = sync_twin(atype_text)
    send_keys = sync_twin(asend_keys)
    mouse_move = sync_twin(amouse_move)
    mouse_click = sync_twin(amouse_click)
    savevm = sync_twin(asavevm)
    loadvm = sync_twin(aloadvm)
    reset = sync_twin(areset)


def check_tag(tag: str) -> str:
    """``tag`` when it is a valid snapshot name. :raise ValueError: otherwise."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", tag):
        raise ValueError(f"snapshot tag must be 1-64 of [A-Za-z0-9_.-], got {tag!r}")
    return tag


def _decode_image(data: bytes) -> Image.Image:
    # Deferred: loading the plugin (which imports this contract) must not import PIL.
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return image.convert("RGB")
