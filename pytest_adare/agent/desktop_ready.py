"""Wait until a desktop guest's session is usable: a window holds the keyboard focus.

The agent connects seconds before X, the window manager and the terminal are up; a
ready state saved before that would restore a half-started desktop for every test.
"""

from __future__ import annotations

from typing import Protocol

from pytest_adare.errors import VMTimeout


class _ShellResult(Protocol):
    @property
    def returncode(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


class RunsShell(Protocol):
    """What the probe needs: the guest facade's ``shell`` (kept structural, no import)."""

    async def shell(self, command: str, *, timeout: float | None = None) -> _ShellResult: ...

# Runs in the guest (python3 with python-xlib, which desktop images carry): exit 0 and
# print the WM_CLASS once the input focus is on a managed top-level window that is not
# the window manager's own: xfwm4 gives the focus to a window of its own while no
# application window is mapped yet (the session's terminal comes seconds later).
FOCUS_PROBE = r"""
import sys, time
from Xlib import X, display
deadline = time.monotonic() + float(sys.argv[1])
last = "no X display yet"

def manager(d, root):
    try:
        check = root.get_full_property(d.intern_atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
        if not check:
            return None
        window = d.create_resource_object("window", check.value[0])
        name = window.get_full_property(d.intern_atom("_NET_WM_NAME"), X.AnyPropertyType)
        value = name.value if name else b""
        return (value.decode() if isinstance(value, bytes) else str(value)).lower() or None
    except Exception:
        return None

def clients(d, root):
    # The windows the manager manages (EWMH), by class: what a timeout should show.
    try:
        listed = root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        names = []
        for wid in (listed.value if listed else []):
            wm_class = d.create_resource_object("window", wid).get_wm_class()
            names.append(wm_class[-1] if wm_class else hex(wid))
        return ", ".join(names) or "none"
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"

while time.monotonic() < deadline:
    try:
        d = display.Display(sys.argv[2])
        window = d.get_input_focus().focus
        root = d.screen().root
        last = "no window has the keyboard focus"
        while window not in (None, X.NONE, X.PointerRoot) and window != root:
            wm_class = window.get_wm_class()
            if wm_class:
                wm = manager(d, root)
                if wm is not None and any(part.lower() == wm for part in wm_class):
                    last = (f"only the window manager's own window ({wm}) has the keyboard "
                            f"focus; windows it manages: {clients(d, root)}")
                    break
                print("focused", " ".join(wm_class))
                sys.exit(0)
            window = window.query_tree().parent
        d.close()
    except Exception as exc:
        last = f"{type(exc).__name__}: {exc}"
    time.sleep(0.3)
print(last)
sys.exit(1)
"""


async def await_focused_window(
    guest: RunsShell, timeout: float, display: str = ":0", console_tail: list[str] | None = None
) -> str:
    """Wait until a window on ``display`` has the keyboard focus; its WM_CLASS.

    :raise VMTimeout: no window got the focus within ``timeout`` (says what was last seen).
    """
    result = await guest.shell(
        f"python3 - {timeout:g} {display} <<'ADARE_EOF'\n{FOCUS_PROBE}\nADARE_EOF",
        timeout=timeout + 30,
    )
    if result.returncode != 0:
        last = (result.stdout + result.stderr).strip()[-300:]
        raise VMTimeout(
            f"a focused window on the guest desktop {display} (last seen: {last})",
            timeout,
            console_tail or [],
        )
    return result.stdout.strip().removeprefix("focused ")
