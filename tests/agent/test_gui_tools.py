"""GUI tools for real: a private Xvfb, a small Tk window that logs what it receives,
and the agent's GUI tools driven over a real WebSocket (``client`` fixture, strict)."""

from __future__ import annotations

import ast
import asyncio
import base64
import importlib.util
import io
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
from PIL import Image

if TYPE_CHECKING:
    from conftest import StrictClient

pytestmark = [pytest.mark.asyncio, pytest.mark.gui]

SCREEN = (1024, 768)
WINDOW = (100, 100, 400, 300)  # x, y, width, height of the probe window
WAIT = 15.0

# A Tk window that writes every button, wheel and key event it gets to a log file,
# and turns red on a left click and blue on a right click.
PROBE = r"""
import sys, tkinter as tk
log = open(sys.argv[1], "a", buffering=1)
root = tk.Tk()
root.title("adare-probe")
root.geometry("400x300+100+100")
canvas = tk.Canvas(root, width=400, height=300, background="white", highlightthickness=0)
canvas.pack(fill="both", expand=True)
def note(text):
    log.write(text + "\n")
def press(e):
    note(f"press {e.num} {e.x_root} {e.y_root} shift={e.state & 1}")
    if e.num == 1:
        canvas.configure(background="red")
    elif e.num == 3:
        canvas.configure(background="blue")
canvas.bind("<ButtonPress>", press)
canvas.bind("<ButtonRelease>", lambda e: note(f"release {e.num} {e.x_root} {e.y_root}"))
canvas.bind("<Double-Button-1>", lambda e: note(f"double {e.x_root} {e.y_root}"))
root.bind("<Key>", lambda e: note(f"key {e.keysym} {e.char!r}"))
root.bind("<Control-c>", lambda e: note("chord ctrl+c"))
def ready():
    root.focus_force()
    note("ready")
root.after(100, ready)
root.mainloop()
"""


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` every 20 ms for at most ``timeout`` s; fail saying what was awaited.

    (The probe is another process: its log file is the only thing to watch.)
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def xvfb() -> Iterator[str]:
    """A private Xvfb (display number chosen by Xvfb itself), set as DISPLAY meanwhile."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    if importlib.util.find_spec("pyautogui") is None:  # not imported: it binds to DISPLAY
        pytest.skip("pyautogui is not installed (the 'gui' extra)")
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [
            "Xvfb",
            "-displayfd",
            str(write_end),
            "-screen",
            "0",
            f"{SCREEN[0]}x{SCREEN[1]}x24",
            "-nolisten",
            "tcp",
        ],
        pass_fds=(write_end,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], WAIT)
        number = os.read(read_end, 32).decode().strip() if ready else ""
        if not number:
            raise RuntimeError(f"Xvfb did not report its display number within {WAIT} s")
        display = f":{number}"
        previous = os.environ.get("DISPLAY")
        os.environ["DISPLAY"] = display
        try:
            yield display
        finally:
            if previous is None:
                os.environ.pop("DISPLAY", None)
            else:
                os.environ["DISPLAY"] = previous
    finally:
        os.close(read_end)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Probe:
    """The running probe window and its event log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    async def wait_for(self, line: str) -> None:
        await wait_until(lambda: line in self.lines(), f"the probe to log {line!r}")


@pytest_asyncio.fixture
async def probe(xvfb: str, tmp_path: Path) -> AsyncIterator[Probe]:
    log = tmp_path / "probe.log"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBE, str(log), stderr=asyncio.subprocess.PIPE
    )
    watcher = Probe(log)
    try:
        await wait_until(
            lambda: "ready" in watcher.lines() or proc.returncode is not None,
            "the Tk probe window to start",
        )
        if proc.returncode is not None:
            stderr = await proc.stderr.read() if proc.stderr else b""
            raise RuntimeError(f"the Tk probe exited with {proc.returncode}: {stderr.decode()}")
        yield watcher
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), WAIT)


def decode(shot: dict[str, Any]) -> Image.Image:
    assert shot["image"]["format"] == "png"
    return Image.open(io.BytesIO(base64.b64decode(shot["image"]["data"]))).convert("RGB")


def center() -> tuple[int, int]:
    x, y, w, h = WINDOW
    return x + w // 2, y + h // 2


async def test_screenshot_has_the_screen_size(client: StrictClient, xvfb: str) -> None:
    shot = await client.ok("screenshot")
    assert shot["status"] == "success"
    assert decode(shot).size == SCREEN
    assert shot["offset"] == {"x": 0, "y": 0}


async def test_region_screenshot_has_the_region_size_and_offset(
    client: StrictClient, probe: Probe
) -> None:
    shot = await client.ok("screenshot", x=100, y=120, width=50, height=40)
    image = decode(shot)
    assert image.size == (50, 40)
    assert shot["offset"] == {"x": 100, "y": 120}
    assert image.getpixel((10, 10)) == (255, 255, 255)  # inside the white probe window
    off_screen = await client.ok("screenshot", x=1000, y=0, width=100, height=10)
    assert off_screen["status"] == "error" and "not inside the screen" in off_screen["message"]
    partial = await client.ok("screenshot", x=10)
    assert partial["status"] == "error" and "width and height" in partial["message"]


async def test_clicks_reach_the_window_and_change_what_it_shows(
    client: StrictClient, probe: Probe
) -> None:
    x, y = center()
    before = decode(await client.ok("screenshot")).getpixel((x, y))
    assert before == (255, 255, 255)
    answer = await client.call("click", {"x": x, "y": y})
    assert answer["result"]["status"] == "success"
    await probe.wait_for(f"press 1 {x} {y} shift=0")
    [click_event] = [e for e in client.events(answer["id"]) if e["event_type"] == "gui_click"]
    assert click_event["data"]["x"] == x and click_event["data"]["button"] == "left"

    async def pixel() -> tuple[int, ...]:
        return tuple(
            decode(await client.ok("screenshot", x=x, y=y, width=1, height=1)).getpixel((0, 0))
        )

    assert await wait_for_pixel(pixel, (255, 0, 0)), "the window did not turn red"
    await client.ok("right_click", x=x + 10, y=y)
    await probe.wait_for(f"press 3 {x + 10} {y} shift=0")
    assert await wait_for_pixel(pixel, (0, 0, 255)), "the window did not turn blue"
    await client.ok("double_click", x=x, y=y + 10)
    await probe.wait_for(f"double {x} {y + 10}")


async def wait_for_pixel(read: Callable[[], Any], expected: tuple[int, ...]) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if await read() == expected:
            return True
    return False


async def test_typing_and_keys_reach_the_focused_window(client: StrictClient, probe: Probe) -> None:
    typed = await client.call("keyboard", {"type": "type", "key": "Hi 5!"})
    assert typed["result"]["status"] == "success"
    for line in ("key H 'H'", "key i 'i'", "key space ' '", "key 5 '5'", "key exclam '!'"):
        await probe.wait_for(line)
    [event] = [e for e in client.events(typed["id"]) if e["event_type"] == "gui_keypress"]
    assert event["data"] == {"type": "type", "key": "Hi 5!", "call_id": typed["id"]}
    assert (await client.ok("keyboard", type="press", key="Enter"))["status"] == "success"
    await probe.wait_for("key Return '\\r'")
    assert (await client.ok("keyboard", type="press", key=["tab", "a"]))["status"] == "success"
    await probe.wait_for("key a 'a'")


async def test_long_text_arrives_complete_and_in_order(client: StrictClient, probe: Probe) -> None:
    text = "".join(f"Line{i}:{'abcXYZ'[i % 6]}-{i * 7 % 10}; " for i in range(40))  # > 4 chunks

    def typed() -> str:
        return "".join(
            ast.literal_eval(line.split(" ", 2)[2])
            for line in probe.lines()
            if line.startswith("key ")
        )

    assert (await client.ok("keyboard", type="type", key=text))["status"] == "success"
    await wait_until(lambda: len(typed()) >= len(text), f"{len(text)} typed characters")
    assert typed() == text


async def test_every_printable_ascii_character_arrives_as_itself(
    client: StrictClient, probe: Probe
) -> None:
    # pc105 keymaps hold "<" on two keys; the shifted level of the extra one is ">".
    text = "".join(chr(c) for c in range(0x20, 0x7F))

    def typed() -> str:
        return "".join(
            ast.literal_eval(line.split(" ", 2)[2])
            for line in probe.lines()
            if line.startswith("key ") and not line.startswith("key Shift")
        )

    assert (await client.ok("keyboard", type="type", key=text))["status"] == "success"
    await wait_until(lambda: len(typed()) >= len(text), f"{len(text)} typed characters")
    assert typed() == text


@pytest.mark.parametrize(
    "chord", ["ctrl+c", "Ctrl+C", ["ctrl", "c"]], ids=["string", "capitalised", "list"]
)
async def test_hotkey_sends_a_chord(
    client: StrictClient, probe: Probe, chord: str | list[str]
) -> None:
    assert (await client.ok("keyboard", type="hotkey", key=chord))["status"] == "success"
    await probe.wait_for("chord ctrl+c")


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"type": "tap", "key": "a"}, "keyboard type must be one of press, type, hotkey"),
        ({"type": "press", "key": "nosuchkey"}, "unknown key name(s): 'nosuchkey'"),
        ({"type": "press", "key": "ctrl+c"}, "unknown key name(s): 'ctrl+c'"),
        ({"type": "type", "key": "snow \u2603"}, "cannot type character(s): '\u2603'"),
        ({"type": "type", "key": ["a"]}, "needs the text as a string"),
    ],
)
async def test_bad_keyboard_calls_are_errors(
    client: StrictClient, xvfb: str, params: dict[str, Any], complaint: str
) -> None:
    answer = await client.ok("keyboard", **params)
    assert answer["status"] == "error"
    assert complaint in answer["message"]


async def test_drag_presses_at_the_start_and_releases_at_the_end(
    client: StrictClient, probe: Probe
) -> None:
    answer = await client.call(
        "drag", {"x1": 150, "y1": 160, "x2": 420, "y2": 330, "duration": 0.2}
    )
    assert answer["result"]["status"] == "success"
    await probe.wait_for("release 1 420 330")
    presses = [x for x in probe.lines() if x.startswith("press")]
    assert presses == ["press 1 150 160 shift=0"]
    [event] = [e for e in client.events(answer["id"]) if e["event_type"] == "gui_drag"]
    assert (event["data"]["x1"], event["data"]["y1"]) == (150, 160)


async def test_scroll_in_all_four_directions(client: StrictClient, probe: Probe) -> None:
    x, y = center()
    # X buttons 4/5 are the vertical wheel; Tk reports the horizontal wheel (6/7)
    # as 4/5 with Shift held.
    expected = {"up": "press 4", "down": "press 5", "left": "press 4", "right": "press 5"}
    for direction, prefix in expected.items():
        shift = int(direction in ("left", "right"))
        start = len(probe.lines())
        want = [f"{prefix} {x} {y} shift={shift}"] * 2
        answer = await client.ok("scroll", direction=direction, amount=2, x=x, y=y)
        assert answer["status"] == "success", answer
        await wait_until(
            lambda start=start, want=want: (
                [ln for ln in probe.lines()[start:] if ln.startswith("press")] == want
            ),
            f"two {direction} wheel clicks in the probe log",
        )
    bad = await client.ok("scroll", direction="sideways", amount=1)
    assert bad["status"] == "error" and "up, down, left, right" in bad["message"]


async def test_goto_moves_the_pointer(client: StrictClient, xvfb: str) -> None:
    assert (await client.ok("goto", x=321, y=234))["status"] == "success"
    xdotool = await asyncio.create_subprocess_exec(
        "xdotool", "getmouselocation", "--shell", stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(xdotool.communicate(), WAIT)
    where = stdout.decode()
    assert "X=321" in where.split() and "Y=234" in where.split()
    outside = await client.ok("goto", x=SCREEN[0], y=0)
    assert outside["status"] == "error" and "outside the screen (1024x768)" in outside["message"]


async def test_screenshot_window_finds_the_window_by_title(
    client: StrictClient, probe: Probe
) -> None:
    answer = await client.ok("screenshot_window", window="ADARE-probe")
    assert answer["status"] == "success"
    [shot] = answer["screenshots"]
    assert decode(shot).size == WINDOW[2:]
    assert shot["offset"] == {"x": WINDOW[0], "y": WINDOW[1]}
    assert shot["window"]["title"] == "adare-probe"
    missing = await client.ok("screenshot_window", window="no such window")
    assert missing["status"] == "error" and "no visible window" in missing["message"]


async def test_idle_waits_and_reports_an_event(client: StrictClient) -> None:
    before = (await client.ok("get_timestamp"))["timestamp"]
    answer = await client.call("idle", {"duration": 0.3})
    after = (await client.ok("get_timestamp"))["timestamp"]
    assert answer["result"]["status"] == "success"
    assert after - before >= 0.3, "idle answered before its duration had passed (guest clock)"
    [event] = client.events(answer["id"])
    assert event["event_type"] == "gui_idle" and event["data"]["duration"] == 0.3
    negative = await client.ok("idle", duration=-1)
    assert negative["status"] == "error"


async def test_screenshots_use_maim_when_asked_and_a_missing_maim_is_refused(
    client: StrictClient, xvfb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("maim") is None:
        pytest.skip("maim is not installed (scripts/setup installs it)")
    with monkeypatch.context() as no_maim:
        no_maim.setenv("PATH", str(tmp_path))  # the in-process agent looks maim up on PATH
        refused = await client.ok("set_screenshot_method", use_maim=True)
    assert refused["status"] == "error" and "maim is not installed" in refused["message"]
    used = await client.ok("set_screenshot_method", use_maim=True)
    assert (used["status"], used["method"]) == ("success", "maim")
    assert decode(await client.ok("screenshot")).size == SCREEN
    region = await client.ok("screenshot", x=100, y=120, width=50, height=40)
    assert decode(region).size == (50, 40) and region["offset"] == {"x": 100, "y": 120}
    with monkeypatch.context() as no_maim:
        no_maim.setenv("PATH", str(tmp_path))
        missing = await client.ok("screenshot")  # proves the screenshots went through maim
    assert missing["status"] == "error" and "maim is not installed" in missing["message"]
    back = await client.ok("set_screenshot_method", use_maim=False)
    assert back == {
        "status": "success",
        "message": "screenshots use pyautogui",
        "method": "pyautogui",
    }
    assert decode(await client.ok("screenshot")).size == SCREEN


@pytest.mark.parametrize("mode", ["host", "disabled"])
async def test_gui_mode_host_or_disabled_turns_gui_tools_into_clear_errors(
    client: StrictClient, xvfb: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("ADARE_GUI_MODE", mode)
    for tool, params in [
        ("screenshot", {}),
        ("click", {"x": 1, "y": 1}),
        ("keyboard", {"type": "press", "key": "a"}),
    ]:
        answer = await client.ok(tool, **params)
        assert answer["status"] == "error"
        assert f"ADARE_GUI_MODE={mode}" in answer["message"]


async def test_without_display_gui_tools_say_so(
    client: StrictClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    answer = await client.ok("screenshot")
    assert answer["status"] == "error"
    assert "DISPLAY is not set" in answer["message"]
