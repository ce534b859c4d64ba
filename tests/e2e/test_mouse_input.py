"""Mouse input on the built-in desktop image, observed inside the guest.

A full-screen Tk window in the guest (``pointer_recorder.py``) logs every pointer event
X delivers; each test moves, clicks, double clicks, right clicks, drags or scrolls
through the facade (``Guest.goto``, ``click``, ``double_click``, ``right_click``,
``drag``, ``scroll``) and reads what the guest received. Both routes run each test:
``host`` (``use_screen(QemuScreen)``: QMP ``input-send-event`` into QEMU's USB
tablet, what ``gui="host"`` uses) and ``agent`` (the agent's pyautogui in the guest).

One desktop VM for the module (a warm start after the first boot of the session).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_under_test import desktop_image_under_test

from pytest_adare import launch
from pytest_adare.agent.screen import AgentScreen
from pytest_adare.guest import Guest
from pytest_adare.image.manifest import ImageManifest
from pytest_adare.machine_tools.screen import QemuScreen
from pytest_adare.vm import VM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RECORDER = Path(__file__).with_name("pointer_recorder.py").read_text()
LOG = "/tmp/adare-pointer.log"
EVENT_WAIT = 20  # seconds for events to reach the window through QEMU or XTest, and X


@pytest.fixture(scope="module")
def manifest() -> ImageManifest:
    return desktop_image_under_test()


@pytest.fixture(scope="module")
def vm(manifest: ImageManifest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VM]:
    with launch(
        manifest.path or manifest.disk, workdir=tmp_path_factory.mktemp("vm"), progress=None
    ) as running:
        yield running


class Recorder:
    """The recorder window running in the guest, and its log read through the agent."""

    def __init__(self, guest: Guest) -> None:
        self.guest = guest

    def lines(self) -> list[str]:
        return self.guest.shell(f"cat {LOG}").check().stdout.splitlines()

    def mark(self) -> int:
        """How many lines are logged now: :meth:`after` reads from there on."""
        return len(self.lines())

    def after(self, mark: int, until: str, count: int = 1) -> list[str]:
        """The lines logged since ``mark``, once ``count`` of them match the regex ``until``."""
        since = f"tail -n +{mark + 1} {LOG}"
        # Bounded by the guest's clock: under TCG one turn of the loop takes far more than
        # its 0.1 s sleep.
        result = self.guest.shell(
            f"end=$(($(date +%s) + {EVENT_WAIT})); "
            f"until [ $({since} | grep -cE '{until}') -ge {count} ] || [ $(date +%s) -ge $end ]; "
            f"do sleep 0.1; done; {since}",
            timeout=EVENT_WAIT + 30,
        ).check()
        lines = result.stdout.splitlines()
        assert sum(bool(re.search(until, line)) for line in lines) >= count, (
            f"the guest's window got fewer than {count} events matching {until!r} within "
            f"{EVENT_WAIT} s; it got {lines}"
        )
        return lines


@pytest.fixture(scope="module")
def recorder(vm: VM, manifest: ImageManifest) -> Iterator[Recorder]:
    guest = vm.guest
    guest.shell(
        f"rm -f {LOG}; cat > /tmp/pointer_recorder.py <<'ADARE_EOF'\n{RECORDER}\nADARE_EOF\n"
        f"setsid python3 /tmp/pointer_recorder.py {LOG} > /tmp/pointer_recorder.out 2>&1 "
        "< /dev/null &"
    ).check()
    watching = Recorder(guest)
    [ready] = watching.after(0, "^ready ")
    assert manifest.display is None or ready == "ready {} {}".format(*manifest.display)
    yield watching
    guest.shell("pkill -f pointer_recorder.py; true")


class Route:
    """One input route of the VM's facade, and where on the screen its tests act.

    The routes act ``shift`` pixels apart: Tk would take a click at the spot the other
    route just clicked, a moment earlier, for the second half of a double click.
    """

    def __init__(self, guest: Guest, shift: int) -> None:
        self.guest = guest
        self.shift = shift

    def at(self, x: int, y: int) -> tuple[int, int]:
        return x + self.shift, y + self.shift


# Module scope groups the tests by route, the agent's first. Its pointer input must come
# before the host's: once QEMU's USB tablet has put the pointer somewhere, X moves it back
# there before each later XTest button event (seen here with the agent's goto + scroll).
@pytest.fixture(scope="module", params=["agent", "host"])
def route(
    request: pytest.FixtureRequest, vm: VM, manifest: ImageManifest, recorder: Recorder
) -> Iterator[Route]:
    """The VM's facade with its input routed through the agent or QMP (``host``)."""
    guest = vm.guest
    if request.param == "host":
        guest.use_screen(QemuScreen(vm.machine, manifest.display))
        assert isinstance(guest.screen, QemuScreen)
    try:
        yield Route(guest, 0 if request.param == "host" else 40)
    finally:
        guest.use_screen(None)
        assert isinstance(guest.screen, AgentScreen)  # None: back to the agent's tools


def kinds(lines: list[str], *wanted: str) -> list[str]:
    """The lines of those kinds, in order (motion lines left out unless asked for)."""
    return [line for line in lines if line.split()[0] in wanted]


def test_goto_moves_the_pointer_to_the_pixel(route: Route, recorder: Recorder) -> None:
    for x, y in (route.at(101, 203), route.at(870, 555)):
        mark = recorder.mark()
        route.guest.goto(x, y)
        lines = recorder.after(mark, f"^motion {x} {y} 0$")
        assert kinds(lines, "press", "release") == []


def test_click_presses_and_releases_the_left_button_there(route: Route, recorder: Recorder) -> None:
    x, y = route.at(300, 250)
    mark = recorder.mark()
    route.guest.click(x, y)
    lines = recorder.after(mark, "^release 1 ")
    assert kinds(lines, "press", "release", "double") == [f"press 1 {x} {y}", f"release 1 {x} {y}"]


def test_double_click_is_one_double_click_for_the_guest(route: Route, recorder: Recorder) -> None:
    x, y = route.at(420, 330)
    mark = recorder.mark()
    route.guest.double_click(x, y)
    lines = recorder.after(mark, "^release 1 ", count=2)
    # Tk reports the second press of a quick pair as the double click itself.
    assert kinds(lines, "press", "release", "double") == [
        f"press 1 {x} {y}",
        f"release 1 {x} {y}",
        f"double {x} {y}",
        f"release 1 {x} {y}",
    ]


def test_right_click_uses_the_right_button(route: Route, recorder: Recorder) -> None:
    x, y = route.at(512, 400)
    mark = recorder.mark()
    route.guest.right_click(x, y)
    lines = recorder.after(mark, "^release 3 ")
    assert kinds(lines, "press", "release") == [f"press 3 {x} {y}", f"release 3 {x} {y}"]


def test_drag_holds_the_left_button_from_start_to_end(route: Route, recorder: Recorder) -> None:
    (x1, y1), (x2, y2) = route.at(200, 500), route.at(700, 300)
    mark = recorder.mark()
    route.guest.drag(x1, y1, x2, y2)
    lines = recorder.after(mark, "^release 1 ")
    assert kinds(lines, "press", "release") == [f"press 1 {x1} {y1}", f"release 1 {x2} {y2}"]
    held = kinds(lines[lines.index(f"press 1 {x1} {y1}") :], "motion")
    assert held and held[-1] == f"motion {x2} {y2} 1"  # moved there with the button down


def test_scroll_turns_the_wheel_as_many_steps_as_asked(route: Route, recorder: Recorder) -> None:
    x, y = route.at(640, 360)
    route.guest.goto(x, y)
    for direction, button, amount in (("down", 5, 3), ("up", 4, 2)):
        mark = recorder.mark()
        route.guest.scroll(direction, amount)
        lines = recorder.after(mark, f"^release {button} {x} {y}$", count=amount)
        assert kinds(lines, "press") == [f"press {button} {x} {y}"] * amount


def test_sideways_scroll_reaches_the_guest_through_the_agent_only(
    route: Route, recorder: Recorder
) -> None:
    x, y = route.at(600, 380)
    route.guest.goto(x, y)
    if isinstance(route.guest.aio.screen, QemuScreen):
        with pytest.raises(ValueError, match="only up or down, not 'left'"):
            route.guest.scroll("left", 1)  # QEMU's USB tablet has no horizontal wheel
        return
    mark = recorder.mark()
    route.guest.scroll("left", 2)
    lines = recorder.after(mark, "^release 4 .* shift$", count=2)
    assert kinds(lines, "press") == [f"press 4 {x} {y} shift"] * 2  # X button 6, as Tk sees it
