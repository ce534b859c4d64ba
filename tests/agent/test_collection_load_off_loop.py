"""A collection whose module blocks at import costs its own ``run_test`` call, never the
agent (issue 34, item 21: an agent that stopped answering ``run_test`` and then
``upload_testfunctions`` for 300 s each while the guest sat idle).

Loading a collection runs its module. It ran on the agent's event loop, under the
library's lock: a module that waited at import (a network mount, a display, a lock held
by a stuck thread) froze every call, ping and deadline of the agent until it returned.
Now it loads in a worker thread, bounded like the test: the call gets an ERROR verdict
naming the collection, and the agent answers everything else meanwhile. A real agent
process, driven through the public ``Guest`` facade.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from pytest_adare.loop_thread import shared_loop
from tests.local_agent import local_agent_guest

HANGS = """
import time
from pathlib import Path

from adare_guest.testfunctions import testfunction

# Blocks at import until the test creates ``go`` beside this file (at most 60 s).
_go = Path(__file__).with_name("go")
_deadline = time.monotonic() + 60
while not _go.exists() and time.monotonic() < _deadline:
    time.sleep(0.05)


@testfunction
def loaded(ctx):
    return "loaded at last"
"""

GOOD = """
from adare_guest.testfunctions import testfunction


@testfunction
def fine(ctx):
    return "fine"
"""


def write_collections(root: Path) -> Path:
    for name, source in (("hangs", HANGS), ("good", GOOD)):
        (root / name).mkdir(parents=True)
        (root / name / f"{name}.py").write_text(textwrap.dedent(source))
    return root


def test_a_module_blocked_at_import_costs_its_call_and_not_the_agent(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    collections = write_collections(tmp_path / "collections")
    with local_agent_guest(run_dir, "load-test-token") as guest:
        uploaded = guest.upload_testfunctions(collections)
        assert uploaded["collections"] == ["good", "hangs"]
        module_dir = Path(uploaded["path"]) / "hangs"

        async def scenario() -> tuple[list[str], dict[str, object]]:
            order: list[str] = []

            async def stuck_run() -> dict[str, object]:
                # adare's form carries the test's own limit; ``timeout=`` bounds the wait.
                step = {"function": "hangs.loaded", "timeout": 8}
                answer = await guest.aio.call(
                    "run_test", test_name="load hangs", resolved_test_data=step, timeout=60
                )
                order.append("run_test")
                return answer

            running = asyncio.ensure_future(stuck_run())
            await asyncio.sleep(0.5)  # the load has begun
            await guest.aio.now()
            order.append("get_timestamp")
            outcome = await guest.aio.run_test("good.fine")
            order.append(f"good.fine {outcome.status}")
            return order, await running

        order, answer = shared_loop().run(scenario(), timeout=120)
        # Answered while the module still blocked; before, the loop waited for it.
        assert order == ["get_timestamp", "good.fine SUCCESS", "run_test"]
        verdict = answer["result"]
        assert isinstance(verdict, dict) and verdict["status"] == "ERROR", answer
        assert "'hangs.loaded' did not finish loading within 8 s" in verdict["details"][0]
        # The stuck load held nothing: a new upload replaces the collections, and once
        # the module may finish, it loads.
        (module_dir / "go").touch()
        again = guest.upload_testfunctions(collections)
        assert again["collections"] == ["good", "hangs"]
        (Path(again["path"]) / "hangs" / "go").touch()
        assert guest.run_test("hangs.loaded").details == ["loaded at last"]
