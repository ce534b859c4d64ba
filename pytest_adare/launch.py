"""``launch()``: the whole runtime in one ``with`` statement, outside pytest too.

::

    from pytest_adare import launch

    with launch("debian") as vm:            # boot, install/hand off the agent, connect
        print(vm.guest.shell("uname -a").stdout)
"""

from __future__ import annotations

import shutil
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_adare.image.resolve import resolve_image
from pytest_adare.image_provision import build_on_disk
from pytest_adare.machine.registry import backend_for
from pytest_adare.machine_tools.run_dir import disown_run_dir, make_run_dir
from pytest_adare.vm import VM
from pytest_adare.vm_options import VMOptions, option_fields

if TYPE_CHECKING:
    from typing import Unpack  # mypy's target is 3.11; at run time the hint stays a string

    from pytest_adare.vm_options import LaunchOptions


def _print_progress(line: str) -> None:
    print(f"adare: {line}", file=sys.stderr, flush=True)


@contextmanager
def launch(
    image: str | Path,
    *,
    workdir: str | Path | None = None,
    keep_workdir: bool = False,
    progress: Callable[[str], None] | None = _print_progress,
    **options: Unpack[LaunchOptions],
) -> Iterator[VM]:
    """Boot ``image``, connect its agent, yield the :class:`VM` (``vm.guest``), then close.

    ``image`` is a manifest, its directory, a bare disk image, a recipe (``.toml``) or a
    built-in name (``debian``, ``debian-desktop``); recipes and built-in images are built
    on first use and cached. ``options`` are the
    :class:`~pytest_adare.vm_options.VMOptions` fields exposed to ``launch``
    (:class:`~pytest_adare.vm_options.LaunchOptions`; docs/runtime.md lists them with
    their defaults and help);
    what is not given takes its default, and :meth:`VMOptions.from_given` says which
    defaults follow other choices (``transport`` with a ``hypervisor``, ``network`` with
    the transport). The VM works in ``workdir`` (default: a temporary directory, removed
    afterwards unless ``keep_workdir``). Progress lines (one per boot phase, with its
    time) go to ``progress``; pass None for silence.

    :raise TypeError: a keyword that is not a ``launch`` option.
    :raise ValueError: an option has a value it cannot take (before anything starts).
    :raise ImageError: the image spec cannot be resolved.
    :raise VMLaunchError: QEMU could not start.
    :raise VMTimeout: the guest or its agent did not come up in time.
    :raise VMDied: QEMU exited or the guest stopped while starting.
    :raise AgentUnreachable: the agent could not be connected (the message says why).
    """
    allowed = {o.field for o in option_fields() if o.exposed("launch")}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"launch() got unexpected keyword argument(s): {', '.join(unknown)}")
    vm_options = VMOptions.from_given(options)
    backend_for(vm_options)  # a backend that cannot honour the options fails here
    manifest = resolve_image(str(image), progress=progress, booted=build_on_disk)
    own_dir = workdir is None
    # A run folder: what a SIGKILLed process leaves goes with the next one's first VM.
    root = make_run_dir("adare-vm-") if workdir is None else Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    vm = VM(manifest, root, vm_options)
    try:
        vm.start(progress=progress)
        yield vm
    finally:
        vm.close()
        if own_dir and not keep_workdir:
            shutil.rmtree(root, ignore_errors=True)
        elif own_dir:
            disown_run_dir(root)  # kept for the user: never reaped


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`launch`.

    Importing ``pytest_adare.launch`` (``from pytest_adare.launch import launch``) makes
    the package's attribute ``launch`` this module: Python sets a submodule on its
    package. ``from pytest_adare import launch`` elsewhere in the same process then got
    the module, and calling it raised "'module' object is not callable".
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return launch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
