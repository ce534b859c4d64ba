"""Where a VM's screenshots go (``vm_phases.gui.choose_gui``): as asked, the hypervisor's
without a desktop, the agent's when its screenshot works, and after a warm start the
choice its saved state recorded, without asking the agent again."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from pytest_adare.vm_phases.gui import choose_gui


class Agent:
    """The facade's ``call``: counts screenshot probes, answers or fails as told."""

    def __init__(self, works: bool) -> None:
        self.works, self.calls = works, 0

    async def call(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        self.calls += 1
        if not self.works:
            return {"status": "error", "error": "cannot open display :0"}
        return {"status": "success", "result": {"image": ""}}


def choice(gui: str, desktop: bool, agent: Agent, saved: str | None = None) -> tuple[str, str]:
    options, manifest = SimpleNamespace(gui=gui), SimpleNamespace(desktop=desktop)
    vm = SimpleNamespace(options=options, manifest=manifest)
    picked = asyncio.run(choose_gui(cast(Any, vm), cast(Any, agent), saved))
    return picked.mode, picked.reason


def test_a_warm_start_takes_the_saved_choice_without_a_probe() -> None:
    agent = Agent(works=False)
    assert choice("auto", True, agent, saved="agent") == (
        "agent", "auto: the agent's screenshot worked in the saved ready state",
    )  # fmt: skip
    assert agent.calls == 0


def test_without_a_saved_choice_the_agent_is_asked_and_its_answer_decides() -> None:
    works, fails = Agent(works=True), Agent(works=False)
    assert choice("auto", True, works)[0] == "agent" and works.calls == 1
    mode, reason = choice("auto", True, fails, saved="")  # a state saved before it recorded
    assert (mode, fails.calls) == ("host", 1) and "cannot take a screenshot" in reason


def test_what_is_asked_for_and_a_console_image_need_no_probe() -> None:
    agent = Agent(works=True)
    assert choice("host", True, agent, saved="agent")[0] == "host"
    assert choice("auto", False, agent, saved="agent")[0] == "host"
    assert agent.calls == 0
