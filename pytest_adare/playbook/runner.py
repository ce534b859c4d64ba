"""Run a playbook on a guest: the flow, the tests, the settings, the records.

:func:`run_playbook` walks the actions in order with adare's semantics: templates are
filled in when each action starts; a ``loop`` sets ``index``, ``total`` and ``item``
(or ``item_var``) for its body and keeps the variables the body made; ``continue``
ends the current loop iteration or block, ``stop`` the whole run; a non-test action
that fails ends the run; a test whose verdict is not the expected one ends it too
unless ``continue_on_test_failure``; ``settings.idle`` passes between top-level
actions and ``settings.timeout`` bounds the whole run.

Every action becomes an :class:`~.results.ActionRecord`, every test a
:class:`~.results.Verdict`; the result is written as ``playbook-results.json`` in
the artifact directory, where pulled files and screenshots go too.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from PIL import Image

from adare_guest.tool_names import RUN_TEST
from pytest_adare.errors import AdareError, InfrastructureError, ToolError
from pytest_adare.forensics.snapshot import FsSnapshot
from pytest_adare.playbook import actions
from pytest_adare.playbook.actions import ActionFailed
from pytest_adare.playbook.conditions import ConditionProblem, condition_holds
from pytest_adare.playbook.errors import PlaybookError
from pytest_adare.playbook.guest_api import PlaybookGuest
from pytest_adare.playbook.results import ActionRecord, PlaybookResult, Verdict, clip
from pytest_adare.playbook.schema import Playbook, Step
from pytest_adare.playbook.tags import as_placeholders, regex_variables_as_tags
from pytest_adare.playbook.templating import TemplateProblem, render
from pytest_adare.playbook.variables import resolve_declared, shared_variables

PASSING_STATUSES = frozenset({"SUCCESS", "WARNING"})
Pause = Callable[[str], str]
"""Pauses for a ``pause`` action; returns what happened, for the report."""


class Flow(Enum):
    NEXT = "next"
    CONTINUE = "continue"
    STOP = "stop"


class RunAborted(Exception):
    """The run ends here (a failed action, a failed test, the timeout); the message says
    why. Recorded as the result's error."""


def no_pause(why: str) -> str:
    return "not paused (no terminal to wait on)"


GUEST_FUNCTIONS = (
    "import json, sys; sys.path.insert(0, sys.argv[1] + '/../agent/bundle.pyz'); "
    "from adare_guest.testfunctions.functions import automatic_variables as a; "
    "print(json.dumps(a(sys.argv[1])))"
)


class Run:
    """One run's state: the guest, the variables, the snapshots, the records."""

    def __init__(
        self, guest: PlaybookGuest, playbook: Playbook, artifacts: Path, pause: Pause,
        environment: str | None,
    ) -> None:  # fmt: skip
        self.guest = guest
        self.playbook = playbook
        self.folder = playbook.folder
        self.artifacts = artifacts
        self.pause = pause
        self.variables: dict[str, Any] = {}
        self.snapshots: dict[str, FsSnapshot] = {}
        self.target_cache: dict[str, tuple[int, int]] = {}
        self.result = PlaybookResult(playbook.folder.name, environment)
        self.windows = str(guest.server_info.get("platform", "")).startswith("win")
        timeout = playbook.settings.timeout
        self.deadline = time.monotonic() + timeout if timeout else None
        self.screens = 0
        self.auto_pulled = False
        # Their values go into a !re pattern unescaped (adare's rule).
        self.regex_names = frozenset(v.name for v in playbook.variables if v.type == "regex")

    # -- helpers the actions use -------------------------------------------------------

    def budget(self, timeout: Any) -> float | None:
        """An action's own timeout, cut to what is left of the run's."""
        own = float(timeout) if timeout is not None else None
        if self.deadline is None:
            return own
        left = max(self.deadline - time.monotonic(), 1.0)
        return left if own is None else min(own, left)

    def sleep(self, seconds: float) -> None:
        if self.deadline is not None and time.monotonic() + seconds > self.deadline:
            raise RunAborted(f"settings.timeout ({self.playbook.settings.timeout:g}s) reached")
        time.sleep(seconds)

    def snapshot(self, name: str) -> FsSnapshot:
        if name not in self.snapshots:
            known = ", ".join(sorted(self.snapshots)) or "none yet"
            raise ActionFailed(f"no snapshot_filesystem saved {name!r} (saved: {known})")
        return self.snapshots[name]

    def save_image(self, image: Image.Image, name: str) -> str:
        options = dict(self.playbook.settings.screenshot or {})
        fmt = str(options.get("format", "png")).lower()
        suffix = {"jpeg": "jpg"}.get(fmt, fmt)
        if suffix not in ("png", "jpg"):
            raise ActionFailed(f"settings.screenshot.format {fmt!r}: png or jpg")
        self.screens += 1
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
        folder = self.artifacts / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.screens:03d}-{safe}.{suffix}"
        if suffix == "jpg":
            image.convert("RGB").save(path, quality=int(options.get("quality", 95)))
        else:
            image.save(path)
        return str(path.relative_to(self.artifacts))

    # -- the flow ---------------------------------------------------------------------

    def run_steps(self, steps: tuple[Step, ...], depth: int) -> Flow:
        for step in steps:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise RunAborted(f"settings.timeout ({self.playbook.settings.timeout:g}s) reached")
            flow = self.run_step(step, depth)
            if flow is not Flow.NEXT:
                return flow
            if depth == 0 and self.playbook.settings.idle:
                self.sleep(float(self.playbook.settings.idle))
        return Flow.NEXT

    def fields_of(self, step: Step) -> dict[str, Any]:
        raw = {k: v for k, v in step.fields.items() if k != "actions"}
        try:
            rendered = render(raw, self.variables)
        except TemplateProblem as error:
            raise PlaybookError(self.playbook.path, str(error), line=step.line,
                                field=step.kind) from None  # fmt: skip
        return dict(rendered)

    def run_step(self, step: Step, depth: int) -> Flow:
        started = time.monotonic()
        wall = time.time()
        record = ActionRecord(step.kind, step.description, step.line, wall, 0.0, "ok", "", depth)
        self.result.actions.append(record)
        flow = Flow.NEXT
        try:
            fields = self.fields_of(step)
            record.description = clip(str(fields.get("description") or fields.get("name") or ""))
            flow, record.message, record.result = self.dispatch(step, fields, depth)
        except RunAborted as error:
            record.result, record.message = "failed", clip(str(error))
            raise
        except (ActionFailed, ValueError, AdareError) as error:
            if isinstance(error, InfrastructureError):
                raise
            record.result, record.message = "failed", clip(str(error))
            where = f"{self.playbook.path.name}:{step.line}: {step.kind}"
            if self.deadline is not None and time.monotonic() >= self.deadline - 1.0:
                # The action's time was cut to what the run had left (budget).
                raise RunAborted(
                    f"settings.timeout ({self.playbook.settings.timeout:g}s) reached during "
                    f"{where} ({clip(str(error))})"
                ) from None
            raise RunAborted(f"{where} failed: {clip(str(error))}") from None
        except PlaybookError as error:
            record.result, record.message = "error", clip(error.message)
            raise
        except ConditionProblem as error:
            record.result, record.message = "error", clip(str(error))
            raise PlaybookError(self.playbook.path, str(error), line=step.line,
                                field=f"{step.kind}.condition") from None  # fmt: skip
        finally:
            record.seconds = round(time.monotonic() - started, 3)
        return flow

    def dispatch(self, step: Step, fields: dict[str, Any], depth: int) -> tuple[Flow, str, str]:
        kind = step.kind
        if kind in ("stop", "continue"):
            condition = fields.get("condition")
            if condition is not None and not condition_holds(condition, self.variables):
                return Flow.NEXT, "condition does not hold", "ok"
            if kind == "stop":
                self.result.stopped_by = f"line {step.line}: {step.description or 'stop'}"
                return Flow.STOP, "stopping the run", "stopped"
            return Flow.CONTINUE, "skipping the rest of this iteration/block", "continued"
        if kind == "loop":
            return self.loop(step, fields, depth)
        if kind == "block":
            if fields.get("when") and not actions.presence_holds(self, fields["when"]):
                return Flow.NEXT, "when does not hold", "skipped"
            flow = self.block(step, fields, depth)
            return (Flow.STOP if flow is Flow.STOP else Flow.NEXT), "", "ok"
        if kind == "test":
            return Flow.NEXT, *self.test(step, fields)
        message = ACTIONS[kind](self, fields)
        if message is None:
            return Flow.NEXT, "when does not hold", "skipped"
        return Flow.NEXT, message, "ok"

    def block(self, step: Step, fields: Mapping[str, Any], depth: int) -> Flow:
        delay = float(fields.get("delay") or 0)
        for index, child in enumerate(step.children):
            flow = self.run_step(child, depth + 1)
            if flow is Flow.CONTINUE:
                return Flow.NEXT
            if flow is Flow.STOP:
                return flow
            if delay and index + 1 < len(step.children):
                self.sleep(delay)
        return Flow.NEXT

    def loop(self, step: Step, fields: Mapping[str, Any], depth: int) -> tuple[Flow, str, str]:
        items: list[Any] | None = None
        if "items" in fields:
            value = fields["items"]
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    value = [value]
            items = value if isinstance(value, list) else [value]
            count = len(items)
        else:
            count = int(fields["times"])
        item_var = str(fields.get("item_var") or "item")
        control = {"index", "total", item_var}
        saved = {name: self.variables[name] for name in control if name in self.variables}
        try:
            for index in range(count):
                self.variables["index"], self.variables["total"] = index, count
                if items is not None:
                    self.variables[item_var] = items[index]
                for child in step.children:
                    flow = self.run_step(child, depth + 1)
                    if flow is Flow.CONTINUE:
                        break
                    if flow is Flow.STOP:
                        return Flow.STOP, f"stopped in iteration {index}", "ok"
        finally:
            for name in control:  # the loop's own variables do not leak out of it
                self.variables.pop(name, None)
            self.variables.update(saved)
        return Flow.NEXT, f"{count} iterations", "ok"

    def test(self, step: Step, fields: Mapping[str, Any]) -> tuple[str, str]:
        spec = self.playbook.tests[str(fields["name"])]
        started = time.monotonic()
        try:
            parameter = regex_variables_as_tags(
                dict(spec.parameter), self.variables, self.regex_names
            )
            parameter = render(parameter, self.variables)
            parameter, regexes = as_placeholders(parameter, self.variables, self.regex_names)
        except TemplateProblem as error:
            raise PlaybookError(self.playbook.path, str(error), line=spec.line,
                                field=f"tests.{spec.name}.parameter") from None  # fmt: skip
        request: dict[str, Any] = {
            "name": spec.name, "description": spec.description, "function": spec.function,
            "parameter": parameter, "expect_to_fail": spec.expect_to_fail,
            "variables": {**_jsonable(self.variables), **regexes},
        }  # fmt: skip
        timeout = fields.get("timeout", spec.timeout)
        if timeout is not None:
            request["timeout"] = float(timeout)
        try:
            answer = self.guest.call(RUN_TEST, test_name=spec.name, resolved_test_data=request)
        except ToolError as error:  # the agent refused it: an unknown function, bad params
            if isinstance(error, InfrastructureError):
                raise
            answer = {"result": {"status": "ERROR", "details": [str(error)]}}
        verdict = answer.get("result") or {}
        status = str(verdict.get("status", "UNKNOWN"))
        details = [clip(str(d)) for d in verdict.get("details", [])][:20]
        if answer.get("success") is False or not verdict:
            details = details or [clip(str(answer.get("message") or answer.get("error") or ""))]
        observed = str(answer.get("observed_status", status))
        passed = status in PASSING_STATUSES
        seconds = round(time.monotonic() - started, 3)
        self.result.verdicts.append(
            Verdict(
                spec.name, spec.function, observed, passed, spec.expect_to_fail, details,
                seconds, step.line,
            )
        )  # fmt: skip
        expected = "FAILED (expect_to_fail)" if spec.expect_to_fail else "SUCCESS"
        message = f"{spec.function}: {observed}, expected {expected}"
        if passed:
            return message, "ok"
        self.auto_pull()
        if not self.playbook.settings.continue_on_test_failure:
            raise RunAborted(
                f"test {spec.name} failed ({message}); settings.continue_on_test_failure is false"
            )
        return message, "failed"

    def auto_pull(self) -> None:
        """adare's ``auto_pull_on_test_failure``: at the first failed test, pull every
        file the playbook's ``pull`` actions name (as far as they can be filled in)."""
        if self.auto_pulled or not self.playbook.settings.auto_pull_on_test_failure:
            return
        self.auto_pulled = True
        folder = self.artifacts / "auto_pull"
        for source in _pull_sources(self.playbook.actions):
            try:
                path = str(render(source, self.variables))
                folder.mkdir(parents=True, exist_ok=True)
                self.guest.pull(path, folder / (Path(path).name or "pulled"))
            except Exception:
                continue

    def prepare(self, overrides: Mapping[str, Any] | None) -> None:
        """The automatic variables (the agent's), the shared folder, the declared ones."""
        root = str(getattr(getattr(self.guest, "aio", None), "agent_root", "") or "/adare/run")
        base: dict[str, Any] = {}
        if not self.windows:
            run = self.guest.shell(
                f"python3 -c {shlex.quote(GUEST_FUNCTIONS)} {shlex.quote(root)}", timeout=60
            )
            if run.returncode == 0:
                base.update(json.loads(run.stdout))
            else:
                raise RunAborted(f"could not read the automatic variables: {run.stderr[-300:]}")
        base.update(shared_variables(root, self.windows))
        self.variables = resolve_declared(self.playbook, base, overrides)
        self.push_shared(str(base["adare_shared"]))
        for collection in sorted((self.folder / "testfunctions").glob("*/")):
            self.guest.upload_testfunctions(collection)

    def push_shared(self, guest_root: str) -> None:
        shared = self.folder / "shared"
        if not shared.is_dir():
            return
        files = [p for p in sorted(shared.rglob("*")) if p.is_file()]
        dirs = {guest_root} | {
            f"{guest_root}/{p.parent.relative_to(shared).as_posix()}" for p in files
        }
        self.guest.shell("mkdir -p " + " ".join(shlex.quote(d) for d in sorted(dirs)), timeout=60)
        for path in files:
            self.guest.push(path, f"{guest_root}/{path.relative_to(shared).as_posix()}")


ACTIONS: dict[str, Callable[[Run, Mapping[str, Any]], str | None]] = {
    "command": actions.command,
    "idle": actions.idle,
    "save_variable": actions.save_variable,
    "save_timestamp": actions.save_timestamp,
    "pull": actions.pull,
    "snapshot_filesystem": actions.snapshot_filesystem,
    "pull_changed_files": actions.pull_changed_files,
    "screenshot": actions.screenshot,
    "pause": actions.pause,
    "click": actions.click,
    "goto": actions.goto,
    "drag": actions.drag,
    "scroll": actions.scroll,
    "keyboard": actions.keyboard,
    "wait_until": actions.wait_until,
}


def _pull_sources(steps: tuple[Step, ...]) -> list[Any]:
    found: list[Any] = []
    for step in steps:
        if step.kind == "pull":
            src = step.fields["src"]
            found.extend(src if isinstance(src, list) else [src])
        found.extend(_pull_sources(step.children))
    return found


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, value in values.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[name] = value
    return kept


def run_playbook(
    guest: PlaybookGuest,
    playbook: Playbook,
    artifacts: Path,
    *,
    variables: Mapping[str, Any] | None = None,
    pause: Pause = no_pause,
    environment: str | None = None,
) -> PlaybookResult:
    """Run ``playbook`` on ``guest``; files it pulls and its results go to ``artifacts``.

    Never raises for what the playbook does: a failed action, a failed test, a bad
    template or the timeout end the run and are the result's ``error``; the VM or the
    agent breaking (:class:`~pytest_adare.errors.InfrastructureError`) is raised.
    """
    run = Run(guest, playbook, artifacts, pause, environment)
    started = time.monotonic()
    diff_before: FsSnapshot | None = None
    try:
        run.prepare(variables)
        if playbook.settings.enable_filesystem_diff:
            diff_before = guest.fs_snapshot("C:\\" if run.windows else "/")
        run.run_steps(playbook.actions, 0)
        if diff_before is not None:
            after = guest.fs_snapshot("C:\\" if run.windows else "/")
            diff = after.diff(diff_before)
            guest.pull_changed(diff, artifacts / "filesystem_diff")
        run.result.completed = True
    except RunAborted as error:
        run.result.error = str(error)
    except PlaybookError as error:
        run.result.error = str(error)
    except InfrastructureError:
        raise
    finally:
        run.result.seconds = time.monotonic() - started
        run.result.variables = _jsonable(run.variables)
        run.result.write(artifacts)
    return run.result
