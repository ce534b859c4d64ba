"""The machine contract every hypervisor backend implements, and the pieces they share.

- :mod:`.base` — :class:`~.base.MachineBackend` (the typed protocol), its
  :class:`~.base.Capability` set, :class:`~.base.UnsupportedFeature` and
  :class:`~.base.MachineCommandError`, and :class:`~.base.MachineImage`.
- :mod:`.core` — :class:`~.core.MachineCore`: the state, console and sync methods both
  backends share, written once.
- :mod:`.results` — what the evidence methods return.
- :mod:`.console`, :mod:`.bounded_wait`, :mod:`.input_events` — the console capture, the
  wait that ends when the machine dies, QEMU-style input events.

A new backend is one package whose machine class passes
``tests/unit/test_machine_protocol_compliance.py``.
"""
