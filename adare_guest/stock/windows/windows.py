"""The stock ``windows`` collection: registry keys and values, event-log entries.

Uses ``winreg`` and ``wevtutil`` (both part of Windows). On another OS every
check is an ERROR saying so. **Untested**: pytest-adare has no Windows guest
image yet, so these checks have only been run against their error paths.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from typing import Any

from adare_guest.testfunctions import TestContext, TestError, testfunction

_HIVES = {
    "HKEY_CLASSES_ROOT": "HKEY_CLASSES_ROOT",
    "HKCR": "HKEY_CLASSES_ROOT",
    "HKEY_CURRENT_USER": "HKEY_CURRENT_USER",
    "HKCU": "HKEY_CURRENT_USER",
    "HKEY_LOCAL_MACHINE": "HKEY_LOCAL_MACHINE",
    "HKLM": "HKEY_LOCAL_MACHINE",
    "HKEY_USERS": "HKEY_USERS",
    "HKU": "HKEY_USERS",
    "HKEY_CURRENT_CONFIG": "HKEY_CURRENT_CONFIG",
    "HKCC": "HKEY_CURRENT_CONFIG",
}
_EVENT_NS = {"e": "http://schemas.microsoft.com/win/2004/08/events/event"}


def _winreg(ctx: TestContext) -> Any:
    ctx.error_if(sys.platform != "win32", f"this check runs on Windows only, not {sys.platform}")
    # Deferred: winreg exists only on Windows, and the collection must load elsewhere too.
    import winreg

    return winreg


def _split_key(winreg: Any, key_path: str) -> tuple[Any, str]:
    hive, _, subkey = key_path.replace("/", "\\").partition("\\")
    name = _HIVES.get(hive.upper())
    if name is None:
        raise TestError(f"unknown registry hive {hive!r}; use one of {sorted(_HIVES)}")
    return getattr(winreg, name), subkey


def _type_name(winreg: Any, kind: int) -> str:
    names = [n for n in dir(winreg) if n.startswith("REG_") and getattr(winreg, n) == kind]
    return min(names, key=len) if names else f"UNKNOWN_TYPE_{kind}"


@testfunction(description="the registry key exists (HKLM\\\\Software\\\\...)")
def registry_key_exists(ctx: TestContext, key_path: str) -> str:
    winreg = _winreg(ctx)
    hive, subkey = _split_key(winreg, key_path)
    try:
        winreg.CloseKey(winreg.OpenKey(hive, subkey))
    except FileNotFoundError:
        ctx.fail(f"registry key does not exist: {key_path}")
    except PermissionError:
        raise TestError(f"permission denied opening {key_path}") from None
    return f"registry key exists: {key_path}"


@testfunction(description="a registry value equals expected_value (and has value_type)")
def registry_value_matches(
    ctx: TestContext,
    key_path: str,
    value_name: str,
    expected_value: str | int | list[str],
    value_type: str | None = None,
) -> str:
    winreg = _winreg(ctx)
    hive, subkey = _split_key(winreg, key_path)
    try:
        with winreg.OpenKey(hive, subkey) as key:
            actual, kind = winreg.QueryValueEx(key, value_name)
    except FileNotFoundError:
        ctx.fail(f"registry key or value does not exist: {key_path}\\{value_name}")
    except PermissionError:
        raise TestError(f"permission denied reading {key_path}\\{value_name}") from None
    type_name = _type_name(winreg, kind)
    ctx.fail_if(
        value_type is not None and value_type.upper() != type_name,
        f"registry value type is {type_name}, expected {value_type}",
    )
    matches = ctx.matches(
        actual if isinstance(actual, (int, list)) else str(actual), expected_value
    )
    ctx.fail_if(not matches.ok, f"registry value {value_name}: {matches.message} ({type_name})")
    return f"registry value matches: {actual!r} ({type_name})"


@testfunction(description="an event-log record matches event_id / provider / message_pattern")
def event_log_contains(
    ctx: TestContext,
    log_name: str = "System",
    event_id: int | None = None,
    provider: str | None = None,
    message_pattern: str | None = None,
    max_events: int = 1000,
) -> str:
    ctx.error_if(sys.platform != "win32", f"this check runs on Windows only, not {sys.platform}")
    wevtutil = shutil.which("wevtutil")
    ctx.error_if(wevtutil is None, "wevtutil not found")
    assert wevtutil is not None
    try:
        regex = re.compile(message_pattern) if message_pattern else None
    except re.error as exc:
        raise TestError(f"bad message_pattern {message_pattern!r}: {exc}") from None
    command = [wevtutil, "qe", log_name, f"/c:{max_events}", "/rd:true", "/f:RenderedXml"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise TestError(f"cannot run wevtutil: {exc}") from None
    ctx.error_if(done.returncode != 0, f"wevtutil failed: {done.stderr.strip()}")
    try:
        events = ElementTree.fromstring(f"<Events>{done.stdout}</Events>")
    except ElementTree.ParseError as exc:
        raise TestError(f"cannot parse wevtutil output: {exc}") from None
    checked = 0
    for event in events.findall("e:Event", _EVENT_NS):
        checked += 1
        found_id = event.findtext("e:System/e:EventID", "", _EVENT_NS)
        source = event.find("e:System/e:Provider", _EVENT_NS)
        message = event.findtext("e:RenderingInfo/e:Message", "", _EVENT_NS)
        if event_id is not None and found_id != str(event_id):
            continue
        if provider is not None and (source is None or source.get("Name") != provider):
            continue
        if regex is not None and not regex.search(message):
            continue
        return f"{log_name}: event {found_id} matches: {message[:200]!r}"
    ctx.fail(f"none of the last {checked} {log_name} events matches")
