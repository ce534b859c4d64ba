"""The parts a :class:`~pytest_adare.vm.VM` is composed of: its state, each start-up
phase, the readiness checks, the warm start and the evidence calls.

Every phase is an async function over one :class:`~pytest_adare.vm_phases.state.VMState`
and runs on :func:`~pytest_adare.loop_thread.shared_loop`; what it makes for a later phase
(the bundle, the boot inputs, the seed, the share disks) it returns, and ``vm.py`` hands
it on: it composes them into ``AsyncVM`` and derives the sync ``VM`` from it with
``sync_twin``. In start order:
``bundle`` (the host-side agent bundle), ``handoff`` (what a built-in image's init is
handed, or the NoCloud seed), ``hypervisor`` (the machine started: the ``qemu`` line),
``handoff.await_boot`` | ``delivery`` + ``install`` (the agent brought up), ``connect``
(diagnosed by ``diagnose`` when it fails), ``readiness`` (listening, systemd, the ready
command, the desktop), ``gui`` (which screen); ``warm`` replaces all but ``bundle`` when a
saved ready state fits. ``evidence`` holds what is taken from a running VM.
"""
