"""The machine contract every hypervisor backend implements, and the pieces they share.

- :mod:`.base` — :class:`~.base.MachineBackend` (the typed protocol), its
  :class:`~.base.Capability` set, :class:`~.base.UnsupportedFeature` and
  :class:`~.base.MachineCommandError`, and :class:`~.base.MachineImage`.
- :mod:`.core` — :class:`~.core.MachineCore`: the state, console and sync methods both
  backends share, written once.
- :mod:`.results` — what the evidence methods return.
- :mod:`.console`, :mod:`.bounded_wait`, :mod:`.input_events` — the console capture, the
  wait that ends when the machine dies, QEMU-style input events.

- :mod:`.spec` — :class:`~.spec.MachineSpec`: what a VM asks of its machine, given
  whole to every backend's factory; each field says how it meets a saved state.
- :mod:`.registry` — the backends by name (``--adare-backend``) and what each can do.

A new backend is one package whose machine class passes
``tests/unit/pytest_adare/machine/test_machine_protocol_compliance.py``,
and one line in :mod:`.registry`.
"""
