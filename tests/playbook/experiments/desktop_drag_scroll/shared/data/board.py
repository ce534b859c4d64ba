"""A board for the GUI actions: a checkered source square (the experiment's needle), a
DROP zone, and a log of what the pointer did (clicks, drags, wheel turns)."""

import sys
import tkinter as tk

log_path = sys.argv[1]
root = tk.Tk()
root.title("adare board")
root.geometry("520x300+200+150")
canvas = tk.Canvas(root, width=520, height=300, background="white", highlightthickness=0)
canvas.pack()
for row in range(8):
    for col in range(8):
        colour = "#ff8000" if (row + col) % 2 else "#202020"
        x, y = 40 + col * 10, 40 + row * 10
        canvas.create_rectangle(x, y, x + 10, y + 10, fill=colour, outline="")
canvas.create_rectangle(300, 60, 480, 240, outline="#0040c0", width=3)
canvas.create_text(390, 150, text="DROP", font=("DejaVu Sans", 28, "bold"), fill="#0040c0")
pressed = {}


def note(line):
    with open(log_path, "a") as log:
        log.write(line + "\n")


def inside(x, y, box):
    return box[0] <= x <= box[2] and box[1] <= y <= box[3]


def press(event):
    pressed["at"] = (event.x, event.y)


def release(event):
    start = pressed.pop("at", None)
    if start is None:
        return
    moved = abs(event.x - start[0]) + abs(event.y - start[1])
    if moved < 5 and inside(event.x, event.y, (40, 40, 120, 120)):
        note("clicked source")
    elif inside(*start, (40, 40, 120, 120)) and inside(event.x, event.y, (300, 60, 480, 240)):
        note("dropped on target")
    else:
        note(f"released at {event.x} {event.y} from {start[0]} {start[1]}")


canvas.bind("<ButtonPress-1>", press)
canvas.bind("<ButtonRelease-1>", release)
canvas.bind("<Button-4>", lambda event: note("wheel up"))
canvas.bind("<Button-5>", lambda event: note("wheel down"))
note("board shown")
root.mainloop()
