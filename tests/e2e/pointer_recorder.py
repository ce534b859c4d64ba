"""Run inside the desktop guest (its python3 and Tk): a full-screen window that logs
every pointer event X delivers to it, one line each, flushed at once.

    python3 pointer_recorder.py LOG

Lines: ``ready W H`` once the window is up, then ``motion X Y B1`` (B1: 1 while the
left button is held), ``press N X Y``, ``release N X Y`` (both with ``shift`` appended
while Shift is down) and ``double X Y`` (Tk's double click: it stands for the second
press of a quick pair). Coordinates are the root window's, i.e. screen pixels. On X11,
Tk 8.6 sees the wheel as buttons 4 (up) and 5 (down), and the horizontal wheel's
buttons 6 (left) and 7 (right) as Shift with 4 and 5.
"""

import sys
import tkinter as tk

SHIFT_MASK = 0x1
BUTTON1_MASK = 0x100

log = open(sys.argv[1], "w", buffering=1)  # line-buffered: every event is read at once
root = tk.Tk()
# No decorations and the whole screen: the window covers every point a test may use.
root.overrideredirect(True)
width, height = root.winfo_screenwidth(), root.winfo_screenheight()
root.geometry(f"{width}x{height}+0+0")
canvas = tk.Canvas(root, width=width, height=height, background="white", highlightthickness=0)
canvas.pack()


def note(*fields: object) -> None:
    log.write(" ".join(str(field) for field in fields) + "\n")


canvas.bind(
    "<Motion>", lambda e: note("motion", e.x_root, e.y_root, int(bool(e.state & BUTTON1_MASK)))
)


def button(kind: str, event: "tk.Event[tk.Canvas]") -> None:
    shift = ["shift"] if event.state & SHIFT_MASK else []
    note(kind, event.num, event.x_root, event.y_root, *shift)


canvas.bind("<ButtonPress>", lambda e: button("press", e))
canvas.bind("<ButtonRelease>", lambda e: button("release", e))
canvas.bind("<Double-Button-1>", lambda e: note("double", e.x_root, e.y_root))


def ready() -> None:
    root.lift()
    note("ready", width, height)


root.after(300, ready)
root.mainloop()
