"""The Guest facade (DESIGN §5): the test's vocabulary over one ``call()`` primitive.

:class:`AsyncGuest` is the core; :class:`Guest` runs each of its coroutines on the
process-wide loop thread (:func:`pytest_adare.loop_thread.shared_loop`), so the two
can never disagree::

    r = guest.shell("echo hi; exit 3")          # sync, any thread
    r = await guest.aio.shell("echo hi; exit 3")  # async twin, on the shared loop

Transports only implement :class:`pytest_adare.agent.connection.AgentConnection`.
Screenshots, pointer and keyboard go to one :class:`Screen`: the agent's GUI tools
(:class:`~pytest_adare.agent.screen.AgentScreen`, the default) or QEMU's screendump
and input (:class:`~pytest_adare.machine_tools.screen.QemuScreen`, ``gui="host"``); the facade
itself never asks which. File transfer is :mod:`pytest_adare.agent.transfer`.

The package follows the facade's sections, one module each: ``core`` (the connection,
``call()``, the screen, forwarded ports, events), ``commands``, ``files``, ``gui``,
``forensics``, ``waits``, ``clock``, ``testfunctions``, the result types in ``results``,
and ``facade`` composing :class:`AsyncGuest` and its sync twin :class:`Guest`. Import
the names from here.
"""

from pytest_adare.guest.clock import MAX_IDLE, guest_time
from pytest_adare.guest.core import EventHub, Screen, tool_result
from pytest_adare.guest.facade import AsyncGuest, Guest, Keyboard, set_breakpoint_hook
from pytest_adare.guest.forensics import FsWatch
from pytest_adare.guest.gui import AsyncKeyboard, MouseButton, check_click
from pytest_adare.guest.results import ShellResult, TestOutcome
from pytest_adare.guest.waits import describe_run
from pytest_adare.guest_waits import Window

# In the order of the API page (docs/api/guest.md orders by it): what a test gets
# back, the screen and events, the facade, its helpers.
__all__ = [  # noqa: RUF022
    "Window",
    "ShellResult",
    "TestOutcome",
    "FsWatch",
    "Screen",
    "EventHub",
    "AsyncKeyboard",
    "AsyncGuest",
    "MouseButton",
    "MAX_IDLE",
    "Keyboard",
    "Guest",
    "tool_result",
    "check_click",
    "describe_run",
    "guest_time",
    "set_breakpoint_hook",
]
