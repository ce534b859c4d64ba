"""OCR reads light text on dark wherever it is on a real screen: a Tk window on a private
Xvfb with a selected terminal-style line, a word whose last four letters are selected,
a selected list item and a dark title bar (each light on dark inside dark on light),
beside a dark panel with a large light heading, which must keep reading."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from PIL import Image, ImageGrab, features
from private_display import private_display

from pytest_adare.screen.text import find_text

pytestmark = pytest.mark.gui

WINDOW = r"""
import tkinter as tk
root = tk.Tk()
root.geometry("700x420+20+20")
root.configure(background="white")
tk.Label(root, text="Mail Settings", font=("DejaVu Sans", 11, "bold"), background="#2b2b2b",
         foreground="#f0f0f0", anchor="w").place(x=0, y=0, width=700, height=26)
text = tk.Text(root, font=("DejaVu Sans Mono", 8), background="white", foreground="black",
               borderwidth=0, highlightthickness=0, selectbackground="black",
               selectforeground="white", inactiveselectbackground="black")
text.insert("end", "ALPHA first line\nBRAVO second line\nCHARLIE third line\n")
text.tag_add("sel", "1.1", "1.5")  # "LPHA", as a drag from the second letter selects
text.tag_add("sel", "2.0", "2.end+1c")  # the whole line, as a triple click selects
text.place(x=10, y=40, width=300, height=100)
box = tk.Listbox(root, font=("DejaVu Sans", 9), selectbackground="#1c4f8f",
                 selectforeground="white", background="white", highlightthickness=0,
                 exportselection=False)
for item in ("Inbox", "Outbox", "Drafts", "Archive"):
    box.insert("end", item)
box.selection_set(2)
box.place(x=350, y=40, width=200, height=100)
tk.Label(root, text="Large Title", font=("DejaVu Sans", 30, "bold"), background="#202020",
         foreground="white").place(x=10, y=200, width=470, height=110)
root.after(300, lambda: print("ready", flush=True))
root.mainloop()
"""


@pytest.fixture(scope="module")
def screen() -> Iterator[Image.Image]:
    if not features.check("xcb"):
        pytest.skip("Pillow was built without XCB: ImageGrab cannot read an X display")
    with private_display() as display:
        window = subprocess.Popen(
            [sys.executable, "-c", WINDOW], env={**os.environ, "DISPLAY": display},
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert window.stdout is not None
            assert window.stdout.readline().strip() == "ready"
            yield ImageGrab.grab(xdisplay=display)
        finally:
            window.terminate()
            window.wait(10)
            assert window.stdout is not None
            window.stdout.close()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("BRAVO", id="selected-line"),
        pytest.param("ALPHA", id="word-with-selected-letters"),
        pytest.param("Drafts", id="selected-list-item"),
        pytest.param("Mail Settings", id="dark-title-bar"),
        pytest.param("CHARLIE", id="plain-line"),
        pytest.param("Large Title", id="large-light-heading-on-dark"),
    ],
)
def test_text_is_read_in_either_polarity(screen: Image.Image, text: str) -> None:
    found = find_text(text, screen)
    assert [match.text for match in found] == [text]
