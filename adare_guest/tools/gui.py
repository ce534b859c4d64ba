"""GUI tools: screenshots, mouse and keyboard inside the guest's X display (pyautogui).

``pyautogui`` is imported on the first GUI call, never at import time: it
connects to the X server as it is imported, so importing it eagerly would
crash an agent started before (or without) a desktop. Every GUI tool answers
``status: "error"`` with the reason instead when

- ``ADARE_GUI_MODE`` is ``host`` or ``disabled`` (the host drives the GUI
  through QEMU, or GUI tools are off),
- ``DISPLAY`` is unset (no X session; Wayland is not supported),
- ``pyautogui`` is missing or cannot open the display.

pyautogui settings, and why:

- ``FAILSAFE = False``: the fail-safe aborts every call while the pointer is in
  a screen corner. Nobody sits at the guest's mouse to use it, and tests
  legitimately click at (0, 0).
- ``PAUSE = 0.02``: the default sleeps 0.1 s after *every* call (each typed
  character), which makes typing slow; a small pause still lets X clients
  process one event before the next arrives.

All pyautogui work runs in worker threads, one action at a time (a lock), so
two calls never interleave their mouse/keyboard events.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from adare_guest.config import AgentConfig
from adare_guest.protocol import EventType
from adare_guest.tools.base import AgentState, CallContext, ToolGroup, tool

GUI_MODE_ENV = "ADARE_GUI_MODE"
DISABLED_MODES = ("host", "disabled")
PYAUTOGUI_PAUSE = 0.02
"""Seconds pyautogui sleeps after each action (see the module docstring)."""
MAX_IDLE = 3600.0
"""Longest ``idle`` in seconds."""
KEYBOARD_TYPES = ("press", "type", "hotkey")
TYPE_CHUNK = 64
"""Characters typed between two checks for a cancelled call."""
SCROLL_DIRECTIONS = ("up", "down", "left", "right")
_SUBPROCESS_TIMEOUT = 10.0

T = TypeVar("T")


class GuiUnavailable(RuntimeError):
    """The GUI cannot be driven from this agent; the message says why and what to do."""


class GuiInputError(ValueError):
    """A GUI call's parameters are unusable (off-screen point, unknown key, ...)."""


def load_pyautogui() -> types.ModuleType:
    """Import and configure pyautogui, or explain why the GUI is unavailable.

    :raise GuiUnavailable: GUI mode off, no ``DISPLAY``, pyautogui missing or broken.
    """
    mode = os.environ.get(GUI_MODE_ENV, "").strip().lower()
    if mode in DISABLED_MODES:
        raise GuiUnavailable(
            f"GUI tools are off in this agent ({GUI_MODE_ENV}={mode}); "
            "drive the GUI from the host (--adare-gui=host) instead"
        )
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        raise GuiUnavailable(
            "no X display: DISPLAY is not set for the agent (start it inside the X session "
            "or set DISPLAY, e.g. DISPLAY=:0; Wayland is not supported)"
        )
    # pyautogui imports mouseinfo, which calls sys.exit() when tkinter is missing (it is in
    # our guests); the agent needs none of it, so it is blocked before the import.
    sys.modules.setdefault("mouseinfo", None)  # type: ignore[arg-type]
    try:
        # pyscreeze's import starts `which` twice and drops the first process with its
        # pipes open: that ResourceWarning is theirs, not ours (the second is closed below).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            # Deferred: optional, heavy, and needs a display; only GUI tools load it.
            import pyautogui
    except ImportError as exc:
        raise GuiUnavailable(
            f"pyautogui is not installed in the guest ({exc}); build the agent bundle with "
            "gui=True or pip install pyautogui"
        ) from None
    except (Exception, SystemExit) as exc:  # Xlib raises its own errors; deps may exit()
        raise GuiUnavailable(
            f"pyautogui cannot open display {os.environ.get('DISPLAY')!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    _close_which_pipes(sys.modules.get("pyscreeze"))
    pyautogui.FAILSAFE = False
    pyautogui.PAUSE = PYAUTOGUI_PAUSE
    if sys.platform.startswith("linux"):
        _align_x11_shift_levels()
    module: types.ModuleType = pyautogui
    return module


def _close_which_pipes(pyscreeze: types.ModuleType | None) -> None:
    """pyscreeze runs ``which scrot`` at import and leaves the pipes of that process
    open (a ResourceWarning at exit); they are read by nobody, so close them."""
    process = getattr(pyscreeze, "whichProc", None)
    for pipe in (getattr(process, "stdout", None), getattr(process, "stderr", None)):
        if pipe is not None:
            pipe.close()


def _align_x11_shift_levels() -> None:
    """Map each printable ASCII character to a keycode at the shift level pyautogui uses.

    pyautogui presses Shift for characters such as ``<`` but takes whichever keycode X
    lists first for the keysym; on a pc105 keymap that is the extra ``<>`` key, where
    Shift gives ``>``. For ASCII the keysym equals the code point, so the right keycode
    is the one holding that keysym at level 1 (shifted) or 0 (plain).
    """
    # Deferred: pyautogui is optional (see load_pyautogui); this runs after it loaded.
    from pyautogui import _pyautogui_x11 as x11

    display = x11._display
    for code_point in range(0x20, 0x7F):
        char = chr(code_point)
        if char not in x11.keyboardMapping:
            continue
        level = 1 if x11.pyautogui.isShiftCharacter(char) else 0
        for keycode, index in display.keysym_to_keycodes(code_point):
            if index == level:
                x11.keyboardMapping[char] = keycode
                break


def encode_png(image: Any) -> str:
    """Base64 of ``image`` (a PIL image) as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def screenshot_dict(image: Any, x: int, y: int) -> dict[str, Any]:
    """The wire form of one screenshot taken at screen offset (x, y)."""
    return {
        "image": {
            "data": encode_png(image),
            "format": "png",
            "width": image.width,
            "height": image.height,
        },
        "offset": {"x": x, "y": y},
    }


@dataclass(frozen=True)
class Region:
    """A screen rectangle."""

    x: int
    y: int
    width: int
    height: int


@dataclass(frozen=True)
class WindowInfo:
    """A visible top-level X window found by title."""

    window_id: int
    title: str
    region: Region


MAX_LISTED_WINDOWS = 500


def find_windows(title: str) -> list[WindowInfo]:
    """Viewable X windows whose title contains ``title`` (case-insensitive).

    Uses python-xlib, else ``xdotool``.

    :raise GuiUnavailable: neither python-xlib nor xdotool is available.
    """
    try:
        # Deferred: python-xlib is optional; without it xdotool is used.
        from Xlib import display as xdisplay
    except ImportError:
        return _find_windows_xdotool(title)
    connection = xdisplay.Display()
    try:
        return _find_windows_xlib(connection, title)
    finally:
        connection.close()


def _find_windows_xlib(connection: Any, title: str) -> list[WindowInfo]:
    # Deferred: python-xlib is optional; the caller checked that it imports.
    from Xlib import X

    # Deferred with Xlib above.
    from Xlib.error import XError

    root = connection.screen().root
    net_wm_name = connection.intern_atom("_NET_WM_NAME")
    utf8 = connection.intern_atom("UTF8_STRING")
    wanted = title.lower()
    found: list[WindowInfo] = []
    pending = [root]
    while pending:
        window = pending.pop()
        try:
            pending.extend(window.query_tree().children)
            if window == root or window.get_attributes().map_state != X.IsViewable:
                continue
            name = _window_title(window, net_wm_name, utf8)
            if not name or wanted not in name.lower():
                continue
            geometry = window.get_geometry()
            origin = root.translate_coords(window, 0, 0)
        except XError:  # the window vanished while we looked at it
            continue
        region = Region(origin.x, origin.y, geometry.width, geometry.height)
        found.append(WindowInfo(window.id, name, region))
    return found


def _window_title(window: Any, net_wm_name: int, utf8: int) -> str:
    prop = window.get_full_property(net_wm_name, utf8)
    if prop is not None and prop.value:
        value = prop.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    name = window.get_wm_name()
    if isinstance(name, bytes):
        return name.decode("latin-1")
    return name or ""


def _find_windows_xdotool(title: str) -> list[WindowInfo]:
    if shutil.which("xdotool") is None:
        raise GuiUnavailable("finding windows needs python-xlib or xdotool; neither is installed")
    search = _run(["xdotool", "search", "--onlyvisible", "--name", _literal_regex(title)])
    found: list[WindowInfo] = []
    for window_id in search.split():
        shell = dict(
            line.split("=", 1)
            for line in _run(["xdotool", "getwindowgeometry", "--shell", window_id]).splitlines()
            if "=" in line
        )
        name = _run(["xdotool", "getwindowname", window_id]).rstrip("\n")
        region = Region(int(shell["X"]), int(shell["Y"]), int(shell["WIDTH"]), int(shell["HEIGHT"]))
        found.append(WindowInfo(int(window_id), name, region))
    return found


def _literal_regex(text: str) -> str:
    return re.escape(text)  # xdotool matches case-insensitively by itself


def _run(argv: list[str]) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT, check=False
    )
    return done.stdout


def _error(message: str) -> dict[str, Any]:
    return {"status": "error", "message": message}


class GuiTools(ToolGroup):
    """Mouse, keyboard and screenshots in the guest's X session, through pyautogui."""

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        super().__init__(config, state)
        self._action_lock = threading.Lock()

    async def _gui(self, ctx: CallContext, action: Callable[[types.ModuleType], T]) -> T:
        """Run ``action(pyautogui)`` in a worker thread, one GUI action at a time."""

        def locked() -> T:
            with self._action_lock:
                return action(load_pyautogui())

        return await ctx.run_in_thread(locked)

    async def _guarded(
        self, ctx: CallContext, action: Callable[[types.ModuleType], dict[str, Any]]
    ) -> dict[str, Any]:
        try:
            return await self._gui(ctx, action)
        except (GuiUnavailable, GuiInputError) as exc:
            return _error(str(exc))

    # ------------------------------------------------------------------ screenshots
    def _grab(self, region: Region | None) -> Any:
        if self.state.screenshot_use_maim:
            return _grab_with_maim(region)
        return _grab_with_pillow(region)

    @tool(timeout=60)
    async def screenshot(
        self,
        ctx: CallContext,
        *,
        x: int | None = None,
        y: int | None = None,
        width: int | None = None,
        height: int | None = None,
    ) -> dict[str, Any]:
        """The whole screen, or the region (x, y, width, height), as a base64 PNG."""

        def take(pg: types.ModuleType) -> dict[str, Any]:
            region = _region(pg, x, y, width, height)
            image = self._grab(region)
            left, top = (region.x, region.y) if region else (0, 0)
            return {
                "status": "success",
                "message": f"screenshot {image.width}x{image.height} at ({left}, {top})",
                **screenshot_dict(image, left, top),
            }

        return await self._guarded(ctx, take)

    @tool(timeout=60)
    async def screenshot_window(self, ctx: CallContext, *, window: str) -> dict[str, Any]:
        """Screenshots of every visible window whose title contains ``window``."""
        if not window.strip():
            return _error("window must be a non-empty part of a window title")

        def take(pg: types.ModuleType) -> dict[str, Any]:
            windows = find_windows(window)
            if not windows:
                raise GuiInputError(f"no visible window with {window!r} in its title")
            screen = Region(0, 0, *pg.size())
            shots = []
            for info in windows:
                visible = _clip(info.region, screen)
                if visible is None:
                    continue
                shot = screenshot_dict(self._grab(visible), visible.x, visible.y)
                shot["window"] = {"id": info.window_id, "title": info.title}
                shots.append(shot)
            if not shots:
                raise GuiInputError(f"the windows matching {window!r} are all off-screen")
            return {
                "status": "success",
                "message": f"{len(shots)} window(s) matching {window!r}",
                "screenshots": shots,
            }

        return await self._guarded(ctx, take)

    @tool(timeout=10)
    async def set_screenshot_method(self, ctx: CallContext, *, use_maim: bool) -> dict[str, Any]:
        """Take screenshots with ``maim`` (True) or pyautogui/Pillow (False)."""
        if use_maim and shutil.which("maim") is None:
            return _error("maim is not installed in the guest; screenshots keep using pyautogui")
        with self.state.lock:
            self.state.screenshot_use_maim = use_maim
        method = "maim" if use_maim else "pyautogui"
        return {"status": "success", "message": f"screenshots use {method}", "method": method}

    # ------------------------------------------------------------------ mouse
    async def _click(
        self, ctx: CallContext, x: int, y: int, button: str, clicks: int
    ) -> dict[str, Any]:
        def click(pg: types.ModuleType) -> dict[str, Any]:
            _check_point(pg, x, y)
            pg.click(x=x, y=y, clicks=clicks, interval=0.05, button=button)
            return {"status": "success", "message": f"{button} click x{clicks} at ({x}, {y})"}

        result = await self._guarded(ctx, click)
        if result["status"] == "success":
            await ctx.emit(
                EventType.GUI_CLICK, {"x": x, "y": y, "button": button, "clicks": clicks}
            )
        return result

    @tool(timeout=30)
    async def click(self, ctx: CallContext, *, x: int, y: int) -> dict[str, Any]:
        """Left click at (x, y)."""
        return await self._click(ctx, x, y, "left", 1)

    @tool(timeout=30)
    async def right_click(self, ctx: CallContext, *, x: int, y: int) -> dict[str, Any]:
        """Right click at (x, y)."""
        return await self._click(ctx, x, y, "right", 1)

    @tool(timeout=30)
    async def double_click(self, ctx: CallContext, *, x: int, y: int) -> dict[str, Any]:
        """Left double click at (x, y)."""
        return await self._click(ctx, x, y, "left", 2)

    @tool(timeout=60)
    async def drag(
        self,
        ctx: CallContext,
        *,
        x1: int,
        y1: int,
        x2: int,
        y2: int,
        duration: float = 0.5,
    ) -> dict[str, Any]:
        """Press the left button at (x1, y1), move to (x2, y2) over ``duration`` s, release."""
        if not 0 <= duration <= 60:
            return _error(f"duration must be 0..60 seconds, got {duration}")

        def drag(pg: types.ModuleType) -> dict[str, Any]:
            _check_point(pg, x1, y1)
            _check_point(pg, x2, y2)
            pg.moveTo(x1, y1)
            pg.mouseDown(x=x1, y=y1, button="left")
            try:
                pg.moveTo(x2, y2, duration=duration)
            finally:
                pg.mouseUp(x=x2, y=y2, button="left")
            return {"status": "success", "message": f"dragged ({x1}, {y1}) -> ({x2}, {y2})"}

        result = await self._guarded(ctx, drag)
        if result["status"] == "success":
            await ctx.emit(EventType.GUI_DRAG, {"x1": x1, "y1": y1, "x2": x2, "y2": y2})
        return result

    @tool(timeout=30)
    async def goto(
        self, ctx: CallContext, *, x: int, y: int, duration: float = 0.0
    ) -> dict[str, Any]:
        """Move the pointer to (x, y)."""
        if not 0 <= duration <= 60:
            return _error(f"duration must be 0..60 seconds, got {duration}")

        def move(pg: types.ModuleType) -> dict[str, Any]:
            _check_point(pg, x, y)
            pg.moveTo(x, y, duration=duration)
            return {"status": "success", "message": f"pointer at ({x}, {y})"}

        return await self._guarded(ctx, move)

    @tool(timeout=60)
    async def scroll(
        self,
        ctx: CallContext,
        *,
        direction: str,
        amount: int = 3,
        x: int | None = None,
        y: int | None = None,
    ) -> dict[str, Any]:
        """Scroll ``amount`` wheel clicks up, down, left or right (at (x, y) if given)."""
        if direction not in SCROLL_DIRECTIONS:
            return _error(
                f"direction must be one of {', '.join(SCROLL_DIRECTIONS)}, got {direction!r}"
            )
        if not 1 <= amount <= 1000:
            return _error(f"amount must be 1..1000 wheel clicks, got {amount}")
        if (x is None) != (y is None):
            return _error("give both x and y, or neither")

        def wheel(pg: types.ModuleType) -> dict[str, Any]:
            if x is not None and y is not None:
                _check_point(pg, x, y)
            sign = 1 if direction in ("up", "right") else -1
            if direction in ("up", "down"):
                pg.scroll(sign * amount, x=x, y=y)
            else:
                pg.hscroll(sign * amount, x=x, y=y)
            return {"status": "success", "message": f"scrolled {direction} by {amount}"}

        return await self._guarded(ctx, wheel)

    # ------------------------------------------------------------------ keyboard
    @tool(timeout=300)
    async def keyboard(
        self,
        ctx: CallContext,
        *,
        type: str,
        key: str | list[str],
        interval: float = 0.0,
    ) -> dict[str, Any]:
        """``press`` a key (or a list in turn), ``type`` text, or ``hotkey`` a chord.

        A chord is ``"ctrl+c"`` or ``["ctrl", "c"]``; key names are pyautogui's.
        """
        if type not in KEYBOARD_TYPES:
            return _error(f"keyboard type must be one of {', '.join(KEYBOARD_TYPES)}, got {type!r}")
        if not 0 <= interval <= 5:
            return _error(f"interval must be 0..5 seconds, got {interval}")
        if type == "type" and not isinstance(key, str):
            return _error("keyboard type 'type' needs the text as a string in key")

        def press(pg: types.ModuleType) -> dict[str, Any]:
            if type == "type":
                assert isinstance(key, str)
                _check_keys(pg, list(key), "cannot type character(s)")
                for start in range(0, len(key), TYPE_CHUNK):
                    if ctx.cancelled.is_set():
                        raise GuiInputError(f"cancelled after typing {start} character(s)")
                    pg.write(key[start : start + TYPE_CHUNK], interval=interval)
                return {"status": "success", "message": f"typed {len(key)} character(s)"}
            keys = _split_keys(key, chord=type == "hotkey")
            _check_keys(pg, keys, "unknown key name(s)")
            if type == "hotkey":
                pg.hotkey(*keys, interval=interval)
            else:
                pg.press(keys, interval=interval)
            return {"status": "success", "message": f"{type} {'+'.join(keys)}"}

        result = await self._guarded(ctx, press)
        if result["status"] == "success":
            shown = key if isinstance(key, str) else "+".join(key)
            await ctx.emit(EventType.GUI_KEYPRESS, {"type": type, "key": shown[:200]})
        return result

    @tool(timeout=30)
    async def list_windows(self, ctx: CallContext) -> dict[str, Any]:
        """Every visible window that has a title: ``windows`` = [{id, title, x, y,
        width, height}] in screen pixels (at most :data:`MAX_LISTED_WINDOWS`)."""

        def listed(pg: types.ModuleType) -> dict[str, Any]:
            windows = find_windows("")[:MAX_LISTED_WINDOWS]
            return {
                "status": "success",
                "message": f"{len(windows)} visible windows with a title",
                "windows": [
                    {"id": w.window_id, "title": w.title[:1000], "x": w.region.x,
                     "y": w.region.y, "width": w.region.width, "height": w.region.height}
                    for w in windows
                ],
            }  # fmt: skip

        return await self._guarded(ctx, listed)

    # ------------------------------------------------------------------ waiting
    @tool(timeout=MAX_IDLE + 10)
    async def idle(self, ctx: CallContext, *, duration: float) -> dict[str, Any]:
        """Do nothing for ``duration`` seconds (0..3600); needs no display."""
        if not 0 <= duration <= MAX_IDLE:
            return _error(f"duration must be 0..{MAX_IDLE:g} seconds, got {duration}")
        await asyncio.sleep(duration)
        await ctx.emit(EventType.GUI_IDLE, {"duration": duration})
        return {"status": "success", "message": f"idled {duration:g} s"}


def _screen(pg: types.ModuleType) -> Region:
    width, height = pg.size()
    return Region(0, 0, int(width), int(height))


def _check_point(pg: types.ModuleType, x: int, y: int) -> None:
    screen = _screen(pg)
    if not (0 <= x < screen.width and 0 <= y < screen.height):
        raise GuiInputError(
            f"point ({x}, {y}) is outside the screen ({screen.width}x{screen.height})"
        )


def _region(
    pg: types.ModuleType, x: int | None, y: int | None, width: int | None, height: int | None
) -> Region | None:
    if x is None and y is None and width is None and height is None:
        return None
    if width is None or height is None:
        raise GuiInputError("a region needs width and height (x and y default to 0)")
    region = Region(x or 0, y or 0, width, height)
    screen = _screen(pg)
    if region.width <= 0 or region.height <= 0:
        raise GuiInputError(f"region size must be positive, got {width}x{height}")
    if _clip(region, screen) != region:
        raise GuiInputError(
            f"region {region.width}x{region.height} at ({region.x}, {region.y}) is not inside "
            f"the screen ({screen.width}x{screen.height})"
        )
    return region


def _clip(region: Region, screen: Region) -> Region | None:
    left, top = max(region.x, screen.x), max(region.y, screen.y)
    right = min(region.x + region.width, screen.x + screen.width)
    bottom = min(region.y + region.height, screen.y + screen.height)
    if right <= left or bottom <= top:
        return None
    return Region(left, top, right - left, bottom - top)


def _split_keys(key: str | list[str], *, chord: bool) -> list[str]:
    if isinstance(key, list):
        keys = key
    elif chord and "+" in key.strip("+"):
        keys = key.split("+")
    else:
        keys = [key]
    # Names are case-insensitive; a single character keeps its case when pressed
    # ("A" is shift+a) but not in a chord, where "ctrl+C" means ctrl+c.
    keys = [k.strip().lower() if chord or len(k.strip()) > 1 else k for k in keys]
    if not keys or any(not k for k in keys):
        raise GuiInputError(f"no key given in {key!r}")
    return keys


def _check_keys(pg: types.ModuleType, keys: list[str], complaint: str) -> None:
    # pyautogui silently drops keys its X11 backend cannot map: refuse them instead.
    bad = sorted({k for k in keys if not pg.isValidKey(k)})
    if bad:
        raise GuiInputError(f"{complaint}: {', '.join(repr(k) for k in bad)}")


def _grab_with_pillow(region: Region | None) -> Any:
    # Pillow reads the X screen in memory (XCB). pyautogui's own screenshot would
    # shell out to scrot and leave a temporary PNG in the agent's working
    # directory, which shows up in forensic diffs.
    from PIL import ImageGrab

    if region is None:
        return ImageGrab.grab()
    box = (region.x, region.y, region.x + region.width, region.y + region.height)
    return ImageGrab.grab(bbox=box)


def _grab_with_maim(region: Region | None) -> Any:
    # Deferred: Pillow is optional and only screenshots need it.
    from PIL import Image

    argv = ["maim", "--hidecursor"]
    if region is not None:
        argv += ["-g", f"{region.width}x{region.height}+{region.x}+{region.y}"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_SUBPROCESS_TIMEOUT, check=False)
    except FileNotFoundError:
        raise GuiUnavailable("maim is not installed; call set_screenshot_method(false)") from None
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", "replace").strip()
        raise GuiUnavailable(f"maim failed (exit {done.returncode}): {stderr}")
    return Image.open(io.BytesIO(done.stdout))
