#!/bin/sh
# adare-demo-dialog: a small Tk dialog for GUI tests (desktop image only).
#   /adare/init/demo-dialog.sh [--title T] [--message M] [--buttons OK,Cancel] [--clock]
#                              [--output FILE]
# Clicking a button writes its label and a newline to FILE (default
# /tmp/adare-demo-dialog.out) and exits 0; --clock adds a label that shows the time and
# changes every second (something a needle must ignore).
exec python3 - "$@" <<'PYTHON'
import argparse
import time
import tkinter as tk

parser = argparse.ArgumentParser(prog="adare-demo-dialog")
parser.add_argument("--title", default="adare demo")
parser.add_argument("--message", default="Save the changes?")
parser.add_argument("--buttons", default="OK,Cancel")
parser.add_argument("--clock", action="store_true")
parser.add_argument("--output", default="/tmp/adare-demo-dialog.out")
args = parser.parse_args()

root = tk.Tk()
root.title(args.title)
root.configure(background="#e8e8e8")
font = ("DejaVu Sans", 18)
tk.Label(root, text=args.message, font=font, background="#e8e8e8", padx=32, pady=20).pack()
if args.clock:
    clock = tk.Label(root, font=("DejaVu Sans Mono", 18), background="#e8e8e8")
    clock.pack()

    def tick() -> None:
        clock.configure(text=time.strftime("%H:%M:%S"))
        root.after(1000, tick)

    tick()
row = tk.Frame(root, background="#e8e8e8", pady=16)
row.pack()


def choose(label: str) -> None:
    with open(args.output, "w") as out:
        out.write(label + "\n")
    root.destroy()


for label in args.buttons.split(","):
    tk.Button(
        row, text=label, font=font, width=8, command=lambda label=label: choose(label)
    ).pack(side="left", padx=16)
root.mainloop()
PYTHON
