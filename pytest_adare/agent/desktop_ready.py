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
# print the WM_CLASS once the input focus is on a managed top-level window.
FOCUS_PROBE = r"""
import sys, time
from Xlib import X, display
deadline = time.monotonic() + float(sys.argv[1])
last = "no X display yet"
while time.monotonic() < deadline:
    try:
        d = display.Display(sys.argv[2])
        window = d.get_input_focus().focus
        root = d.screen().root
        while window not in (None, X.NONE, X.PointerRoot) and window != root:
            wm_class = window.get_wm_class()
            if wm_class:
                print("focused", " ".join(wm_class))
                sys.exit(0)
            window = window.query_tree().parent
        last = "no window has the keyboard focus"
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
