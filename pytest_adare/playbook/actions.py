"""The guest-facing actions of a playbook, each one function of (run, fields).

Every function gets the action's fields with templates already filled in and returns
a short message for the report, or raises :class:`ActionFailed` (the action did not do
what it says: a command that exited non-zero without ``allow_failure``, a target not
on the screen, a pull of a missing file). The flow (loops, blocks, stop, continue,
tests) is :mod:`.runner`'s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, Protocol

from pytest_adare.playbook.targets import (
    Candidate,
    TargetProblem,
    choose,
    find_candidates,
    point_of,
)
from pytest_adare.playbook.templating import TemplateProblem, evaluate
from pytest_adare.playbook.variables import infer

if TYPE_CHECKING:
    from PIL import Image

    from pytest_adare.forensics.snapshot import FsSnapshot
    from pytest_adare.playbook.guest_api import PlaybookGuest


class Run(Protocol):
    """What an action uses of the run (:class:`pytest_adare.playbook.runner.Run`)."""

    guest: PlaybookGuest
    variables: dict[str, Any]
    snapshots: dict[str, FsSnapshot]
    target_cache: dict[str, tuple[int, int]]
    artifacts: Path
    folder: Path
    windows: bool
    pause: Callable[[str], str]

    def budget(self, timeout: Any) -> float | None: ...
    def sleep(self, seconds: float) -> None: ...
    def snapshot(self, name: str) -> FsSnapshot: ...
    def save_image(self, image: Image.Image, name: str) -> str: ...


CLICK_RETRIES = 3
"""Screens a click, goto or drag looks at for its target (one second apart)."""


class ActionFailed(Exception):
    """The action ran and failed (the message says how)."""


def _artifact(run: Run, name: str, default: str) -> Path:
    """``name`` inside the run's artifact directory, never outside it.

    :raise ActionFailed: ``name`` is absolute or climbs out (``../``).
    """
    root = run.artifacts.resolve()
    relative = Path(name or default)
    target = (root / relative).resolve()
    if relative.is_absolute() or not target.is_relative_to(root) or target == root:
        raise ActionFailed(f"dst {name!r} is not a path inside the test's artifact directory")
    return target


def command(run: Run, fields: Mapping[str, Any]) -> str:
    if fields.get("tool"):
        raise ActionFailed("command.tool is not supported by pytest-adare (the shell runs it)")
    timeout = fields.get("timeout")
    result = run.guest.shell(
        str(fields["command"]),
        cwd=fields.get("cwd"),
        env={str(k): str(v) for k, v in (fields.get("env") or {}).items()} or None,
        timeout=run.budget(timeout),
        admin=bool(fields.get("admin", False)),
        background=bool(fields.get("background", False)),
    )
    code = result.returncode
    message = f"exit {code}" if not fields.get("background") else "started in the background"
    if code not in (0, None) and not fields.get("allow_failure", False):
        tail = (result.stderr or result.stdout).strip()[-200:]
        raise ActionFailed(f"exit code {code}: {tail}" if tail else f"exit code {code}")
    capture = fields.get("capture")
    if capture:
        value = captured(capture, result)
        run.variables[str(capture["variable"])] = value
        message += f", {capture['variable']} = {_short(value)}"
    return message


def captured(capture: Mapping[str, Any], result: Any) -> Any:
    """The value ``capture`` takes from a command's result (adare's CaptureSpec)."""
    source = capture.get("source", "stdout")
    output: Any
    if source == "all":
        output = {"stdout": result.stdout, "stderr": result.stderr,
                  "returncode": result.returncode}  # fmt: skip
    elif source == "returncode":
        output = result.returncode
    else:
        output = result.stdout if source == "stdout" else result.stderr
    parser = capture.get("parser")
    if not parser:
        return output.strip() if isinstance(output, str) else output
    try:
        return evaluate(str(parser), {"output": output})
    except TemplateProblem as error:
        raise ActionFailed(f"capture.parser: {error}") from None


def idle(run: Run, fields: Mapping[str, Any]) -> str:
    seconds = float(fields["duration"])
    if seconds < 0:
        raise ActionFailed(f"duration must be >= 0, got {seconds}")
    run.sleep(seconds)
    return f"{seconds:g}s"


def save_variable(run: Run, fields: Mapping[str, Any]) -> str:
    value = infer(fields.get("value"))
    run.variables[str(fields["name"])] = value
    return f"{fields['name']} = {_short(value)}"


def save_timestamp(run: Run, fields: Mapping[str, Any]) -> str:
    moment = run.guest.now()
    text = moment.isoformat() if hasattr(moment, "isoformat") else str(moment)
    run.variables[str(fields["variable"])] = text
    return f"{fields['variable']} = {text}"


def pull(run: Run, fields: Mapping[str, Any]) -> str:
    sources = fields["src"] if isinstance(fields["src"], list) else [fields["src"]]
    dst = fields.get("dst")
    pulled: list[str] = []
    if len(sources) == 1 and not isinstance(fields["src"], list):
        target = _artifact(run, str(dst or ""), _guest_name(str(sources[0])))
        run.guest.pull(str(sources[0]), target)
        pulled.append(str(target.relative_to(run.artifacts.resolve())))
    else:
        folder = _artifact(run, str(dst or ""), "pulled")
        for source in sources:
            target = folder / _guest_name(str(source))
            run.guest.pull(str(source), target)
            pulled.append(str(target.relative_to(run.artifacts.resolve())))
    return "to " + ", ".join(pulled)


def snapshot_filesystem(run: Run, fields: Mapping[str, Any]) -> str:
    windows = run.windows
    root = str(fields.get("root_path") or ("C:\\" if windows else "/"))
    timeout = fields.get("timeout", 300.0)
    snapshot = run.guest.fs_snapshot(root, timeout=run.budget(timeout))
    name = str(fields["variable"])
    run.snapshots[name] = snapshot
    run.variables[name] = f"<filesystem snapshot of {root}: {len(snapshot)} entries>"
    return f"{name}: {len(snapshot)} entries under {root}"


def pull_changed_files(run: Run, fields: Mapping[str, Any]) -> str:
    before = run.snapshot(str(fields["snapshot_before"]))
    after = run.snapshot(str(fields["snapshot_after"]))
    diff = after.diff(before)
    if not fields.get("include_added", True):
        diff = dataclasses.replace(diff, created=type(diff.created)())
    if not fields.get("include_modified", True):
        diff = dataclasses.replace(diff, modified=type(diff.modified)())
    folder = _artifact(run, str(fields.get("dst") or ""), "changed_files")
    folder.mkdir(parents=True, exist_ok=True)
    files = run.guest.pull_changed(diff, folder)
    return (
        f"{len(files)} files to {folder.name}/ ({len(diff.created)} added, "
        f"{len(diff.modified)} modified)"
    )


def screenshot(run: Run, fields: Mapping[str, Any]) -> str:
    image = run.guest.screenshot()
    box = [fields.get(k) for k in ("x", "y", "width", "height")]
    if any(v is not None for v in box):
        if any(v is None for v in box):
            raise ActionFailed("a screenshot region needs all of x, y, width, height")
        x, y, width, height = (int(v) for v in box)  # type: ignore[arg-type]
        image = image.crop((x, y, x + width, y + height))
    return f"saved {run.save_image(image, str(fields.get('name') or 'screenshot'))}"


def pause(run: Run, fields: Mapping[str, Any]) -> str:
    why = str(fields.get("message") or fields.get("name") or fields.get("description") or "")
    return run.pause(why or "pause action")


# -- GUI ------------------------------------------------------------------------------


def locate(run: Run, target: Mapping[str, Any], screen: Image.Image) -> Candidate | None:
    """Where ``target`` is on ``screen`` after its strategy (None: not there)."""
    try:
        found = find_candidates(target, screen, run.folder)
        return choose(
            found, target.get("strategy"), lambda ref: find_candidates(ref, screen, run.folder)
        )
    except TargetProblem as error:
        raise ActionFailed(str(error)) from None


def point(run: Run, target: Mapping[str, Any]) -> tuple[int, int]:
    """The screen point of ``target`` (looked for on up to :data:`CLICK_RETRIES` screens).

    :raise ActionFailed: it is on none of them.
    """
    key = repr(sorted((k, repr(v)) for k, v in target.items() if k != "use_cache"))
    if target.get("use_cache") and key in run.target_cache:
        return run.target_cache[key]
    for attempt in range(CLICK_RETRIES):
        found = locate(run, target, run.guest.screenshot())
        if found is not None:
            spot = point_of(found, target.get("offset"))
            run.target_cache[key] = spot
            return spot
        if attempt + 1 < CLICK_RETRIES:
            run.sleep(1.0)
    raise ActionFailed(f"target not found on the screen: {_describe_target(target)}")


def click(run: Run, fields: Mapping[str, Any]) -> str:
    x, y = point(run, fields["target"])
    kind = fields.get("type", "left")
    actions: dict[str, Callable[[int, int], None]] = {
        "left": run.guest.click, "right": run.guest.right_click,
        "double": run.guest.double_click,
    }  # fmt: skip
    actions[kind](x, y)
    return f"{kind} click at {x},{y}"


def goto(run: Run, fields: Mapping[str, Any]) -> str:
    x, y = point(run, fields["target"])
    run.guest.goto(x, y)
    return f"pointer to {x},{y}"


def drag(run: Run, fields: Mapping[str, Any]) -> str:
    x1, y1 = point(run, fields["src"])
    x2, y2 = point(run, fields["dst"])
    run.guest.drag(x1, y1, x2, y2)
    return f"{x1},{y1} -> {x2},{y2}"


def scroll(run: Run, fields: Mapping[str, Any]) -> str:
    run.guest.scroll(str(fields["direction"]), int(fields["amount"]))
    return f"{fields['direction']} {fields['amount']}"


def presence_holds(run: Run, conditions: list[Mapping[str, Any]]) -> bool:
    """adare's ``when``: every exists / not_exists holds on one screenshot."""
    screen = run.guest.screenshot()
    for condition in conditions:
        ((kind, target),) = condition.items()
        found = locate(run, target, screen) is not None
        if found != (kind == "exists"):
            return False
    return True


def keyboard(run: Run, fields: Mapping[str, Any]) -> str | None:
    """None: its ``when`` did not hold (skipped)."""
    if fields.get("when") and not presence_holds(run, fields["when"]):
        return None
    keys = run.guest.keyboard
    if "key" in fields:
        keys.press(str(fields["key"]))
        return f"key {fields['key']}"
    if "text" in fields:
        keys.type(str(fields["text"]))
        return f"typed {len(str(fields['text']))} characters"
    combination = [str(k) for k in fields["combination"]]
    keys.hotkey(*combination)
    return "+".join(combination)


def wait_condition_holds(run: Run, condition: Mapping[str, Any], screen: Image.Image) -> bool:
    ((op, inner),) = condition.items()
    if op == "exists":
        return locate(run, inner, screen) is not None
    if op == "not_exists":
        return locate(run, inner, screen) is None
    if op == "not":
        return not wait_condition_holds(run, inner, screen)
    results = (wait_condition_holds(run, sub, screen) for sub in inner)
    return all(results) if op == "all" else any(results)


def changed_fraction(before: Image.Image, after: Image.Image) -> float:
    """The share of pixels that differ between two screens (0..1)."""
    # Deferred: PIL is loaded with the screen anyway
    from PIL import ImageChops

    if before.size != after.size:
        return 1.0
    difference = ImageChops.difference(before.convert("L"), after.convert("L"))
    histogram = difference.histogram()
    total = sum(histogram)
    return (total - histogram[0]) / total if total else 0.0


def wait_until(run: Run, fields: Mapping[str, Any]) -> str:
    timeout = float(fields.get("timeout", 60.0))
    interval = float(fields.get("check_interval", 3.0))
    run.sleep(float(fields.get("initial_delay", 5.0)))
    pixel = dict((fields.get("skip") or {}).get("pixel_change") or {})
    latched = False
    previous: Image.Image | None = None
    started = time.monotonic()
    checks = 0
    while True:
        screen = run.guest.screenshot()
        search = True
        if pixel and not latched:
            change = changed_fraction(previous, screen) if previous is not None else 1.0
            above, below = pixel.get("above"), pixel.get("below")
            blocked = (above is not None and change * 100 > float(above)) or (
                below is not None and change * 100 < float(below)
            )
            search = not blocked
            if search:
                latched = pixel.get("strategy", "once") == "once"
                if pixel.get("idle"):
                    run.sleep(float(pixel["idle"]))
                    screen = run.guest.screenshot()
        previous = screen
        if search:
            checks += 1
            if wait_condition_holds(run, fields["condition"], screen):
                return f"held after {time.monotonic() - started:.1f}s ({checks} checks)"
        if time.monotonic() - started >= timeout:
            raise ActionFailed(f"condition did not hold within {timeout:g}s ({checks} checks)")
        run.sleep(interval)


def _guest_name(path: str) -> str:
    name = PureWindowsPath(path).name if "\\" in path else PurePosixPath(path).name
    return name or "pulled"


def _describe_target(target: Mapping[str, Any]) -> str:
    for key in ("text", "image", "position"):
        if key in target:
            return f"{key} {target[key]!r}"
    return repr(dict(target))[:80]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
