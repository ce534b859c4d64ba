"""Test tools: upload test-function collections, set variables, run a test function.

``upload_testfunctions`` takes a base64 zip whose top-level directories are
collections (``D/D.py``, see :mod:`adare_guest.testfunctions.library`). The archive
comes from the host but is treated as hostile: it is refused *as a whole* when
any member name is absolute, has a drive letter, a backslash or a ``..``
component, is a symlink, or when the member count, the total uncompressed size
or the compression ratio is over its cap. It is extracted into a fresh
directory under ``RUN_DIR/testfunctions``, which then replaces the previous
upload (and the loaded-collection cache) at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from adare_guest.archive import UnsafeArchive, extract_archive
from adare_guest.config import AgentConfig
from adare_guest.protocol import EventType
from adare_guest.testfunctions import (
    DEFAULT_TEST_TIMEOUT,
    TestResult,
    TestStatus,
    arun_test_function,
    automatic_variables,
)
from adare_guest.testfunctions.library import TestFunctionLibrary, UnknownTestFunction
from adare_guest.testfunctions.run_request import (
    BadRunRequest,
    apply_expect_to_fail,
    parse_run_request,
)
from adare_guest.tools.base import AgentState, CallContext, ToolGroup, tool

_UPLOADS = "testfunctions"


def _error(message: str, **extra: Any) -> dict[str, Any]:
    return {"status": "error", "message": message, **extra}


def _verdict(test_name: str, result: TestResult) -> dict[str, Any]:
    """The answer of a run that reached a verdict (whatever the verdict)."""
    return {
        "status": "success",
        "message": f"{test_name}: {result.status.value}",
        "result": result.to_dict(),
    }


def _within_call(ctx: CallContext, seconds: float) -> float:
    """``seconds``, cut to what is left of the call (less a second to answer in)."""
    return min(seconds, max(ctx.remaining() - 1.0, 0.1))


class TestTools(ToolGroup):
    """``upload_testfunctions``, ``set_variables`` and ``run_test``."""

    __test__ = False

    def __init__(self, config: AgentConfig, state: AgentState) -> None:
        super().__init__(config, state)
        root = self.state.testfunctions_dir
        self.library = TestFunctionLibrary(
            Path(root) if root else None, cache=self.state.testfunction_cache
        )

    @tool(timeout=120)
    async def upload_testfunctions(
        self, ctx: CallContext, *, testfunctions_data: str
    ) -> dict[str, Any]:
        """Replace the uploaded collections by those in the base64 zip ``testfunctions_data``."""
        try:
            data = base64.b64decode(testfunctions_data, validate=True)
        except (binascii.Error, ValueError) as exc:
            return _error(f"testfunctions_data is not valid base64: {exc}")
        uploads = Path(self.config.run_dir) / _UPLOADS
        destination = uploads / f"upload-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        try:
            collections = await ctx.run_in_thread(extract_archive, data, destination)
        except UnsafeArchive as exc:
            return _error(f"archive refused: {exc}")
        except OSError as exc:
            return _error(f"cannot extract the archive under {uploads}: {exc}")
        with self.state.lock:
            previous = self.state.testfunctions_dir
            self.state.testfunctions_dir = str(destination)
            self.library.set_root(destination)
        if previous and Path(previous).parent == uploads:
            await ctx.run_in_thread(shutil.rmtree, previous, True)
        return {
            "status": "success",
            "message": f"uploaded {len(collections)} collection(s): {', '.join(collections)}",
            "collections": collections,
            "path": str(destination),
        }

    @tool(timeout=10)
    async def set_variables(
        self, ctx: CallContext, *, variables: str | dict[str, Any], replace: bool = False
    ) -> dict[str, Any]:
        """Merge (or with ``replace``, set) the variables test functions see.

        ``variables`` is a JSON object as a string (a JSON object is accepted too).
        """
        if isinstance(variables, str):
            try:
                parsed = json.loads(variables)
            except json.JSONDecodeError as exc:
                return _error(f"variables is not valid JSON: {exc}")
        else:
            parsed = variables
        if not isinstance(parsed, dict):
            return _error(f"variables must be a JSON object, got {type(parsed).__name__}")
        with self.state.lock:
            if replace:
                self.state.variables.clear()
            self.state.variables.update(parsed)
            names = sorted(self.state.variables)
        return {"status": "success", "message": f"{len(names)} variable(s) set", "variables": names}

    @tool(timeout=3600)
    async def run_test(
        self,
        ctx: CallContext,
        *,
        test_name: str,
        resolved_test_data: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run a test function, asked for in our form or adare's (:mod:`~.run_request`).

        Ours: ``test_name`` is ``collection.name`` (bare: ``standard.name``) and
        ``resolved_test_data`` its params plus the options ``variables``,
        ``expect_to_fail``, ``_VARIABLE_METADATA``. adare's: ``test_name`` is the
        step and ``resolved_test_data`` holds ``function``, ``parameter`` etc.
        The test's limit is ``timeout`` if given, else adare's ``timeout`` field,
        else its decorator's, else
        :data:`~adare_guest.testfunctions.DEFAULT_TEST_TIMEOUT` seconds.
        """
        if timeout is not None and timeout <= 0:
            return _error(f"timeout must be > 0 seconds, got {timeout}")
        try:
            request = parse_run_request(test_name, resolved_test_data)
        except BadRunRequest as exc:
            return _error(f"bad run_test request: {exc}")
        await ctx.emit(EventType.TEST_START, {"test_name": test_name})
        started = time.monotonic()
        limit = timeout if timeout is not None else request.timeout
        # Loading a collection runs its module (its imports included): in a worker
        # thread, bounded like the test, so a module that blocks at import costs this
        # call and never the agent's event loop (every other call, ping and deadline).
        load_limit = _within_call(ctx, limit if limit is not None else DEFAULT_TEST_TIMEOUT)
        try:
            collection, function = await asyncio.wait_for(
                ctx.run_in_thread(self.library.resolve, request.function), load_limit
            )
        except asyncio.TimeoutError:
            stuck = TestResult(
                TestStatus.ERROR,
                [f"the collection of {request.function!r} did not finish loading within "
                 f"{load_limit:g} s: its module still runs (blocked at import?)"],
            )  # fmt: skip
            await self._report(ctx, test_name, stuck, started)
            return _verdict(test_name, stuck)
        except UnknownTestFunction as exc:
            result = TestResult(TestStatus.UNKNOWN, [str(exc)])
            await self._report(ctx, test_name, result, started)
            return _error(str(exc), result=result.to_dict())
        if function is None:
            result = TestResult(
                TestStatus.ERROR,
                [f"collection {collection.name!r} failed to load", collection.load_error or ""],
            )
        else:
            automatic = automatic_variables(str(self.config.run_dir))
            with self.state.lock:
                variables = {**automatic, **self.state.variables, **request.variables}
            if limit is None:  # the server grants a grace period beyond a caller's timeout
                limit = _within_call(ctx, function.timeout or DEFAULT_TEST_TIMEOUT)
            result = await arun_test_function(
                function,
                request.params,
                variables,
                name=f"{collection.name}.{function.name}",
                timeout=limit,
                metadata=request.metadata,
            )
        observed = result.status
        if request.expect_to_fail:
            result = apply_expect_to_fail(result)
        await self._report(ctx, test_name, result, started)
        answer = _verdict(test_name, result)
        if request.expect_to_fail:
            answer["expect_to_fail"] = True
            answer["observed_status"] = observed.value
        return answer

    async def _report(
        self, ctx: CallContext, test_name: str, result: TestResult, started: float
    ) -> None:
        data = {
            "test_name": test_name,
            "status": result.status.value,
            "duration": round(time.monotonic() - started, 6),
        }
        if result.status in (TestStatus.SUCCESS, TestStatus.WARNING):
            await ctx.emit(EventType.TEST_COMPLETE, data)
        else:
            await ctx.emit(EventType.TEST_FAILED, {**data, "details": result.details})
