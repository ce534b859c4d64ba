"""Where test functions come from: collections loaded from files, and the library of them.

A *collection* is a directory ``D`` holding ``D/D.py``; every function in it
decorated with :func:`~adare_guest.testfunctions.testfunction` is a test named
``D.<name>``. :class:`TestFunctionLibrary` finds them by that name, among the
stock collections shipped in ``adare_guest/stock`` and one upload root.

Collections are loaded from their files without touching ``sys.path``: each
load is a fresh module object with a unique name, so a re-uploaded collection
never sees a stale copy of itself. The one thing added to ``sys.modules`` is
the ``adarelib`` alias of :mod:`adare_guest.adarelib_compat`, so collections
written for adare import unchanged.

This module sits above both :mod:`adare_guest.testfunctions` (the decorator,
context, results and runner) and :mod:`adare_guest.adarelib_compat` (which
builds on them): it is where an adare-style function gets adare's context.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import itertools
import pkgutil
import sys
import threading
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adare_guest.adarelib_compat import ALIASED_MODULES
from adare_guest.adarelib_compat.testset.api import TestContext as AdareTestContext
from adare_guest.testfunctions.functions import TestFunction, registered_test_function

__all__ = [
    "STOCK_COLLECTION",
    "STOCK_COLLECTIONS",
    "Collection",
    "TestFunctionLibrary",
    "UnknownTestFunction",
    "install_adarelib_alias",
    "load_collection",
]

STOCK_COLLECTION = "standard"
"""The default collection: a bare test name ``f`` means ``standard.f`` (as in adare)."""

STOCK_COLLECTIONS = ("standard", "sqlite", "json", "jsonl", "csv", "xml", "linux", "windows")
"""Collections shipped inside ``adare_guest`` (``adare_guest/stock/<name>/<name>.py``)."""

_COMPAT_PACKAGE = "adare_guest.adarelib_compat"
_module_serial = itertools.count(1)


class UnknownTestFunction(LookupError):
    """No test function of that name in the library (the message lists what exists)."""


@dataclass
class Collection:
    """One loaded collection: its test functions by short name, or why it failed to load."""

    name: str
    origin: str
    functions: dict[str, TestFunction] = field(default_factory=dict)
    load_error: str | None = None


def _collect(name: str, origin: str, module: types.ModuleType) -> Collection:
    """The module's test functions; adare-style ones get adare's ``ctx`` (its helper names)."""
    functions: dict[str, TestFunction] = {}
    for value in vars(module).values():
        info = registered_test_function(value)
        if info is None:
            continue
        if info.adare_style:
            info = dataclasses.replace(info, context_class=AdareTestContext)
        functions[info.name] = info
    return Collection(name, origin, functions)


def _fresh_module_name(collection: str) -> str:
    return f"adare_testfunctions_{collection}_{next(_module_serial)}"


def _format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def install_adarelib_alias() -> None:
    """Make ``import adarelib...`` give :mod:`adare_guest.adarelib_compat` (idempotent).

    Every compat module is registered under its ``adarelib`` name in
    ``sys.modules``; this works the same from sources and from the zip bundle,
    unlike a path hook. A real ``adarelib`` that is already imported is left alone.
    """
    for suffix in ALIASED_MODULES:
        if "adarelib" + suffix not in sys.modules:
            sys.modules["adarelib" + suffix] = importlib.import_module(_COMPAT_PACKAGE + suffix)


def load_collection(directory: Path) -> Collection:
    """Load collection ``directory.name`` from ``directory/<name>.py``.

    Never raises for a broken collection: the traceback lands in
    ``load_error`` and every test in it then reports ERROR with it.
    """
    name = directory.name
    path = directory / f"{name}.py"
    origin = str(path)
    importlib.invalidate_caches()  # see packages installed since the last load
    install_adarelib_alias()
    try:
        spec = importlib.util.spec_from_file_location(_fresh_module_name(name), path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException as exc:  # a collection may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Collection(name, origin, load_error=_format_exception(exc))
    return _collect(name, origin, module)


def _load_stock(name: str) -> Collection:
    """Stock collection ``name``, from disk or from inside the agent's zip bundle."""
    on_disk = Path(__file__).with_name("stock") / name
    if (on_disk / f"{name}.py").is_file():
        return load_collection(on_disk)
    origin = f"adare_guest/stock/{name}/{name}.py"
    try:
        install_adarelib_alias()
        source = pkgutil.get_data("adare_guest.stock", f"{name}/{name}.py")
        if source is None:
            raise ImportError(f"{origin} not found in the agent bundle")
        module = types.ModuleType(_fresh_module_name(name))
        module.__file__ = origin
        exec(compile(source, origin, "exec"), module.__dict__)
    except Exception as exc:
        return Collection(name, origin, load_error=_format_exception(exc))
    return _collect(name, origin, module)


def _is_collection_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / f"{path.name}.py").is_file()


class TestFunctionLibrary:
    """Test functions by ``collection.name``: the stock collections plus one upload root.

    Collections load lazily on first use and stay cached (in ``cache``, e.g. the
    agent state's dict) until :meth:`set_root` or :meth:`invalidate`; one that
    failed to load is retried on the next lookup. An uploaded collection named
    like a stock one shadows it. A bare name ``f`` means ``standard.f``.
    """

    __test__ = False

    def __init__(
        self,
        root: Path | None = None,
        *,
        include_stock: bool = True,
        cache: dict[str, Any] | None = None,
    ) -> None:
        self._root = root
        self._include_stock = include_stock
        self._cache: dict[str, Any] = {} if cache is None else cache
        self._lock = threading.Lock()

    @property
    def root(self) -> Path | None:
        """Directory whose subdirectories are the uploaded collections."""
        return self._root

    def set_root(self, root: Path | None) -> None:
        """Switch to another upload root and forget every loaded collection."""
        with self._lock:
            self._root = root
            self._cache.clear()

    def invalidate(self) -> None:
        """Forget loaded collections; the next lookup reloads from disk."""
        with self._lock:
            self._cache.clear()

    def collection_names(self) -> list[str]:
        """Names of the collections available now, sorted."""
        names = set(STOCK_COLLECTIONS) if self._include_stock else set()
        if self._root is not None and self._root.is_dir():
            names.update(p.name for p in self._root.iterdir() if _is_collection_dir(p))
        return sorted(names)

    def collection(self, name: str) -> Collection:
        """Load (or take from the cache) collection ``name``.

        :raise UnknownTestFunction: no collection of that name.
        """
        with self._lock:
            cached = self._cache.get(name)
            if isinstance(cached, Collection):
                return cached
            root = self._root
        # Loaded without the lock: a module that blocks at import must not hold every
        # other lookup (nor set_root, which the event loop calls) with it.
        directory = root / name if root is not None else None
        if directory is not None and _is_collection_dir(directory):
            loaded = load_collection(directory)
        elif name in STOCK_COLLECTIONS and self._include_stock:
            loaded = _load_stock(name)
        else:
            raise UnknownTestFunction(
                f"no test collection {name!r}; available: {self.collection_names()}"
            )
        with self._lock:
            # A broken one retries (e.g. after installing a dep); one loaded from a root
            # replaced meanwhile is not kept. Two loads at once: the first one kept wins.
            if loaded.load_error is None and self._root == root:
                kept = self._cache.setdefault(name, loaded)
                return kept if isinstance(kept, Collection) else loaded
        return loaded

    def resolve(self, test_name: str) -> tuple[Collection, TestFunction | None]:
        """Find ``collection.name``; the function is None when the collection failed to load.

        :raise UnknownTestFunction: malformed name, unknown collection or function.
        """
        collection_name, dot, function_name = test_name.partition(".")
        if not dot:  # adare: a bare function name lives in the standard collection
            collection_name, function_name = STOCK_COLLECTION, test_name
        if not collection_name or not function_name:
            raise UnknownTestFunction(
                f"test name {test_name!r} must be 'collection.name' or a name in "
                f"{STOCK_COLLECTION!r} (collections: {self.collection_names()})"
            )
        collection = self.collection(collection_name)
        if collection.load_error is not None:
            return collection, None
        function = collection.functions.get(function_name)
        if function is None:
            raise UnknownTestFunction(
                f"no test function {function_name!r} in collection {collection_name!r}; "
                f"available: {sorted(collection.functions)}"
            )
        return collection, function

    def names(self) -> Iterator[str]:
        """Every ``collection.name`` that loads (loads all collections)."""
        for collection_name in self.collection_names():
            for function_name in sorted(self.collection(collection_name).functions):
                yield f"{collection_name}.{function_name}"
