"""Test functions, the mechanism: the :func:`testfunction` decorator, the
:class:`TestContext` a function gets, its verdicts (:class:`TestStatus`,
:class:`TestResult`) and running one bounded in time (:func:`run_test_function`).
The package docstring (:mod:`adare_guest.testfunctions`) shows how a collection
is written; this module imports neither the library nor adare's compatibility layer.
"""

from __future__ import annotations

import asyncio
import enum
import getpass
import inspect
import os
import platform
import re
import tempfile
import threading
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, TypeVar, overload, runtime_checkable

from adare_guest.placeholders import Comparison, PlaceholderError, Placeholders, has_placeholders

__all__ = [
    "DEFAULT_TEST_TIMEOUT",
    "SupportsTestResult",
    "TestContext",
    "TestError",
    "TestFailed",
    "TestFunction",
    "TestResult",
    "TestStatus",
    "arun_test_function",
    "automatic_variables",
    "registered_test_function",
    "run_test_function",
    "testfunction",
]

DEFAULT_TEST_TIMEOUT = 300.0
"""Seconds a test function may run when neither the call nor the decorator says."""

HOST_SIDE_UNSUPPORTED = (
    "test function {name} is declared execute_on_host=True; host-side test functions "
    "are not supported by pytest-adare (every test function runs in the guest). "
    "Check the host side in the pytest test itself (e.g. guest.screenshot())"
)

_MARK = "__adare_testfunction__"

F = TypeVar("F", bound=Callable[..., Any])


class TestStatus(str, enum.Enum):
    """Verdict of one test function run (the wire value is the member name)."""

    __test__ = False  # not a pytest test class

    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    ERROR = "ERROR"
    WARNING = "WARNING"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class TestResult:
    """``{status, details}`` as carried in ``run_test``'s ``result``."""

    __test__ = False

    status: TestStatus
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``{"status": "SUCCESS", "details": [...]}``."""
        return {"status": self.status.value, "details": list(self.details)}


@runtime_checkable
class SupportsTestResult(Protocol):
    """A return value that carries its own verdict (e.g. adarelib's ``TestResult``)."""

    def as_test_result(self) -> TestResult: ...


class _Verdict(Exception):
    """Raised by :class:`TestContext` checks to end a test with a verdict."""

    def __init__(self, status: TestStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class TestFailed(_Verdict):
    """Raise to end the test as FAILED (what ``ctx.fail_if`` raises)."""

    __test__ = False

    def __init__(self, message: str) -> None:
        super().__init__(TestStatus.FAILED, message)


class TestError(_Verdict):
    """Raise to end the test as ERROR: the check could not be made."""

    __test__ = False

    def __init__(self, message: str) -> None:
        super().__init__(TestStatus.ERROR, message)


class TestContext:
    """What a test function receives as ``ctx``.

    ``params`` are the call's parameters (also passed as keyword arguments),
    ``variables`` the agent's variables (``set_variables``) merged with the
    call's, read-only; ``placeholders`` resolves and compares ``{{ name }}``.
    """

    __test__ = False

    def __init__(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        variables: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.name = name
        self.params: Mapping[str, Any] = types.MappingProxyType(dict(params or {}))
        self.variables: Mapping[str, Any] = types.MappingProxyType(dict(variables or {}))
        self.placeholders = Placeholders(variables, metadata)
        self.cancelled = threading.Event()
        """Set when the run timed out; long sync tests may poll it and stop."""
        self._notes: list[str] = []
        self._warned = False

    def fail_if(self, condition: object, message: str) -> None:
        """End the test as FAILED with ``message`` when ``condition`` is true."""
        if condition:
            raise _Verdict(TestStatus.FAILED, message)

    def error_if(self, condition: object, message: str) -> None:
        """End the test as ERROR (could not check) with ``message`` when ``condition`` is true."""
        if condition:
            raise _Verdict(TestStatus.ERROR, message)

    def warn_if(self, condition: object, message: str) -> None:
        """Record a warning when ``condition`` is true; the test goes on and ends as WARNING."""
        if condition:
            self._warned = True
            self._notes.append(f"WARNING: {message}")

    def fail(self, message: str) -> NoReturn:
        """End the test as FAILED."""
        raise _Verdict(TestStatus.FAILED, message)

    def log(self, message: str) -> None:
        """Add a line to the details, whatever the verdict."""
        self._notes.append(str(message))

    def variable(self, name: str, default: Any = None) -> Any:
        """One variable set by ``set_variables`` (``default`` when unset)."""
        return self.variables.get(name, default)

    def matches(self, actual: object, expected: object) -> Comparison:
        """Compare a value found in the guest with an expected one that may hold placeholders.

        ``expected`` without placeholders must equal ``actual``; a lone
        ``{{ name }}`` compares ``actual`` by that placeholder's metadata; a
        longer template must match as text around its placeholders. A placeholder
        that cannot be compared (no such variable, bad metadata) ends the test
        as ERROR.
        """
        if not has_placeholders(expected):
            ok = actual == expected
            return Comparison(ok, f"{actual!r} {'equals' if ok else 'differs from'} {expected!r}")
        assert isinstance(expected, str)
        try:
            return self.placeholders.match_template(
                actual if isinstance(actual, str) else str(actual), expected
            )
        except PlaceholderError as exc:
            raise _Verdict(TestStatus.ERROR, str(exc)) from None

    def _finish(self, status: TestStatus, details: list[str]) -> TestResult:
        if status is TestStatus.SUCCESS and self._warned:
            status = TestStatus.WARNING
        return TestResult(status, [*self._notes, *details])


@dataclass(frozen=True)
class TestFunction:
    """A decorated function with its registered name.

    ``category`` and ``execute_on_host`` are adare's decorator arguments, kept
    as given; a function with ``execute_on_host=True`` answers ERROR when run.
    ``adare_style`` functions (declared adare's way) may return any value, which
    becomes one line of details. ``context_class`` is what ``ctx`` is built
    from: this module's :class:`TestContext`; loading a collection
    (:mod:`adare_guest.testfunctions.library`) gives adare-style functions the
    ``adarelib`` context, which adds adare's helper names.
    """

    __test__ = False

    name: str
    description: str
    func: Callable[..., Any]
    timeout: float | None = None
    category: str | None = None
    execute_on_host: bool = False
    adare_style: bool = False
    context_class: type[TestContext] = TestContext

    @property
    def is_async(self) -> bool:
        """True for ``async def`` test functions (they are awaited)."""
        return inspect.iscoroutinefunction(self.func)


@overload
def testfunction(__func: F) -> F: ...
@overload
def testfunction(
    name: str | None = None,
    description: str = "",
    category: object = None,
    execute_on_host: bool = False,
    *,
    timeout: float | None = None,
) -> Callable[[F], F]: ...


def testfunction(
    name: F | str | None = None,
    description: str = "",
    category: object = None,
    execute_on_host: bool = False,
    *,
    timeout: float | None = None,
) -> F | Callable[[F], F]:
    """Mark ``def f(ctx, **params)`` (sync or async) as a test function.

    ``name`` defaults to the function's name, ``description`` to its
    docstring's first line, ``timeout`` (seconds) applies when the call gives
    none. Usable bare (``@testfunction``), with keywords, or adare's way:
    ``@testfunction("name", "description", category=..., execute_on_host=False)``.
    Giving the name or description positionally, or ``category`` /
    ``execute_on_host``, marks the function adare-style: loaded from a
    collection, its ``ctx`` also has adare's helpers (see
    :mod:`adare_guest.adarelib_compat`). The function is returned unchanged,
    so it stays callable directly.
    """
    if callable(name):  # bare @testfunction
        return _register(name, None, "", None, False, None, adare_style=False)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"@testfunction name must be a str, got {type(name).__name__}")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"testfunction timeout must be > 0, got {timeout!r}")
    adare_style = name is not None or category is not None or bool(execute_on_host)
    category_name = None if category is None else str(getattr(category, "value", category))

    def mark(func: F) -> F:
        return _register(
            func,
            name,
            description,
            category_name,
            execute_on_host,
            timeout,
            adare_style=adare_style,
        )

    return mark


def _register(
    func: F,
    name: str | None,
    description: str,
    category: str | None,
    execute_on_host: bool,
    timeout: float | None,
    *,
    adare_style: bool,
) -> F:
    if not callable(func):
        raise TypeError(f"@testfunction needs a function, got {type(func).__name__}")
    doc = (inspect.getdoc(func) or "").strip().splitlines()
    info = TestFunction(
        name=name or func.__name__,
        description=description or (doc[0] if doc else ""),
        func=func,
        timeout=timeout,
        category=category,
        execute_on_host=bool(execute_on_host),
        adare_style=adare_style,
    )
    setattr(func, _MARK, info)
    return func


def registered_test_function(value: object) -> TestFunction | None:
    """What :func:`testfunction` recorded on ``value``; None for anything not decorated."""
    info = getattr(value, _MARK, None)
    return info if isinstance(info, TestFunction) else None


def _format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def _result_from_return(value: object, lenient: bool) -> TestResult:
    """What a test function returned → its verdict (SUCCESS unless it carries its own).

    ``lenient`` (adare-style functions) turns any other value into one line,
    as adare does; native functions must return None, a str, a list or a result.
    """
    if isinstance(value, TestResult):
        return value
    if isinstance(value, SupportsTestResult):
        return value.as_test_result()
    if value is None:
        return TestResult(TestStatus.SUCCESS)
    if isinstance(value, str):
        return TestResult(TestStatus.SUCCESS, [value])
    if isinstance(value, (list, tuple)):
        return TestResult(
            TestStatus.SUCCESS, [item if isinstance(item, str) else repr(item) for item in value]
        )
    if lenient:
        return TestResult(TestStatus.SUCCESS, [str(value)])
    raise TypeError(
        f"test function returned {type(value).__name__}; "
        "expected None, a str, a list of str or a TestResult"
    )


def _bind(function: TestFunction, ctx: TestContext, params: Mapping[str, Any]) -> None:
    try:
        inspect.signature(function.func).bind(ctx, **params)
    except TypeError as exc:
        raise _Verdict(
            TestStatus.ERROR, f"bad parameters for test function {ctx.name}: {exc}"
        ) from None


def _execute(function: TestFunction, ctx: TestContext, timeout: float | None) -> TestResult:
    """Run one test function in the calling thread and turn its outcome into a result."""
    try:
        if function.execute_on_host:
            raise _Verdict(TestStatus.ERROR, HOST_SIDE_UNSUPPORTED.format(name=ctx.name))
        _bind(function, ctx, ctx.params)
        if function.is_async:
            coroutine = function.func(ctx, **ctx.params)
            value = asyncio.run(asyncio.wait_for(coroutine, timeout))
        else:
            value = function.func(ctx, **ctx.params)
        result = _result_from_return(value, function.adare_style)
        return ctx._finish(result.status, list(result.details))
    except _Verdict as verdict:
        return ctx._finish(verdict.status, [verdict.message])
    except asyncio.TimeoutError:
        return ctx._finish(TestStatus.ERROR, [_timeout_message(ctx.name, timeout)])
    except AssertionError as exc:
        message = str(exc) or "assertion failed"
        return ctx._finish(TestStatus.FAILED, [message, _format_exception(exc)])
    except BaseException as exc:  # the verdict must be reported, whatever the test raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        return ctx._finish(
            TestStatus.ERROR, [f"{type(exc).__name__}: {exc}", _format_exception(exc)]
        )


def _timeout_message(name: str, timeout: float | None) -> str:
    return f"test function {name} did not finish within {timeout} s"


def _effective_timeout(function: TestFunction, timeout: float | None) -> float:
    if timeout is not None:
        return timeout
    return function.timeout if function.timeout is not None else DEFAULT_TEST_TIMEOUT


def run_test_function(
    function: TestFunction,
    params: Mapping[str, Any] | None = None,
    variables: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    timeout: float | None = None,
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
) -> TestResult:
    """Run ``function`` in a fresh worker thread and wait at most ``timeout`` seconds.

    ``timeout`` defaults to the decorator's, then :data:`DEFAULT_TEST_TIMEOUT`.
    An async test is cancelled at its timeout; a sync one cannot be killed, so
    it is left running in its daemon thread with ``ctx.cancelled`` set and the
    result says ERROR (timed out). ``variables`` and ``metadata`` (adare's
    ``_VARIABLE_METADATA``) define the placeholders; those compared as plain
    text are substituted into ``params`` first.
    """
    return asyncio.run(
        arun_test_function(
            function, params, variables, name=name, timeout=timeout, metadata=metadata
        )
    )


async def arun_test_function(
    function: TestFunction,
    params: Mapping[str, Any] | None = None,
    variables: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    timeout: float | None = None,
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
) -> TestResult:
    """:func:`run_test_function` for asyncio callers: waits without blocking the loop."""
    placeholders = Placeholders(variables, metadata)
    resolved = {key: placeholders.resolve_params(value) for key, value in (params or {}).items()}
    ctx = function.context_class(name or function.name, resolved, variables, metadata)
    limit = _effective_timeout(function, timeout)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[TestResult] = loop.create_future()

    def deliver(result: TestResult) -> None:
        if not done.done():
            done.set_result(result)

    def work() -> None:
        result = _execute(function, ctx, limit)
        try:
            loop.call_soon_threadsafe(deliver, result)
        except RuntimeError:  # the loop closed while the test ran: nobody waits any more
            pass

    threading.Thread(target=work, name=f"testfunction-{ctx.name}", daemon=True).start()
    grace = 1.0 if function.is_async else 0.0
    try:
        return await asyncio.wait_for(asyncio.shield(done), limit + grace)
    except asyncio.TimeoutError:
        ctx.cancelled.set()
        return TestResult(TestStatus.ERROR, [_timeout_message(ctx.name, limit)])
    except asyncio.CancelledError:
        ctx.cancelled.set()
        raise


SESSION_ENV = "/run/adare/session.env"
"""What the built-in desktop image writes about its session (``USER=...`` lines)."""


def _session_user(session_env: str) -> str | None:
    try:
        with open(session_env, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                if key == "USER" and value:
                    return value
    except OSError:
        pass
    return os.environ.get("ADARE_USER")


def _xdg_dirs(home: str) -> dict[str, str]:
    found = {"DESKTOP": "Desktop", "DOCUMENTS": "Documents", "DOWNLOAD": "Downloads"}
    dirs = {name: os.path.join(home, sub) for name, sub in found.items()}
    try:
        with open(os.path.join(home, ".config", "user-dirs.dirs"), encoding="utf-8") as handle:
            for line in handle:
                match = re.match(r'XDG_(\w+)_DIR="(.*)"\s*$', line)
                if match:
                    dirs[match.group(1)] = match.group(2).replace("$HOME", home)
    except OSError:
        pass
    return dirs


def automatic_variables(run_dir: str, session_env: str = SESSION_ENV) -> dict[str, str]:
    """adare's automatic variables, as every ``run_test`` sees them under its own.

    The user is the desktop session's (``session_env``, else ``$ADARE_USER``), else the
    agent's own: ``adare_username``, ``adare_user_home``, ``adare_user_documents``,
    ``adare_user_desktop``, ``adare_user_downloads``; and ``adare_os`` (``linux`` or
    ``windows``), ``adare_temp_dir``, ``adare_run_dir``.
    """
    name = _session_user(session_env)
    home = os.path.expanduser("~")
    if name is not None and os.name == "posix":
        import pwd  # deferred: POSIX only, and this module imports on Windows too

        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            name = None
    if name is None:
        name = getpass.getuser()
    dirs = _xdg_dirs(home)
    return {
        "adare_username": name,
        "adare_user_home": home,
        "adare_user_documents": dirs["DOCUMENTS"],
        "adare_user_desktop": dirs["DESKTOP"],
        "adare_user_downloads": dirs["DOWNLOAD"],
        "adare_os": "windows" if os.name == "nt" else platform.system().lower(),
        "adare_temp_dir": tempfile.gettempdir(),
        "adare_run_dir": str(run_dir),
    }
