"""The desktop-ready probe on a private X server: while only the window manager's own
window holds the focus it keeps waiting, and its last word names the windows the manager
manages (what a timeout in CI shows)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from private_display import private_display
from Xlib import X, Xatom, display

from pytest_adare.agent.desktop_ready import FOCUS_PROBE

pytestmark = pytest.mark.gui


def test_a_focus_on_the_managers_own_window_names_the_managed_windows() -> None:
    with private_display() as name:
        d = display.Display(name)
        root = d.screen().root
        manager = root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        manager.set_wm_class("fakewm", "Fakewm")
        manager.change_property(d.intern_atom("_NET_WM_NAME"), Xatom.STRING, 8, b"fakewm")
        check = d.intern_atom("_NET_SUPPORTING_WM_CHECK")
        root.change_property(check, Xatom.WINDOW, 32, [manager.id])
        terminal = root.create_window(10, 10, 100, 100, 0, X.CopyFromParent)
        terminal.set_wm_class("xfce4-terminal", "Xfce4-terminal")
        terminal.map()
        clients = d.intern_atom("_NET_CLIENT_LIST")
        root.change_property(clients, Xatom.WINDOW, 32, [terminal.id])
        manager.map()
        d.sync()
        manager.set_input_focus(X.RevertToParent, X.CurrentTime)
        d.sync()
        probe = subprocess.run(
            [sys.executable, "-", "2", name], input=FOCUS_PROBE, capture_output=True,
            text=True, timeout=60, env={**os.environ, "DISPLAY": name},
        )  # fmt: skip
        d.close()
    assert probe.returncode == 1, probe.stdout + probe.stderr
    assert probe.stdout.strip() == (
        "only the window manager's own window (fakewm) has the keyboard focus; "
        "windows it manages: Xfce4-terminal"
    )
