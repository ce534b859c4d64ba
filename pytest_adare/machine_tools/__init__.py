"""What every backend and the host layers use over a machine, importing no backend.

``qga`` (the QEMU guest agent client), ``accel`` and ``kvm_access`` (KVM or TCG, and why
not KVM), ``reaper`` (no child process outlives pytest), ``disk_export`` (the disk at one
point in time), ``screen`` (screen and input from any machine), ``screen_recorder`` (the
failure film), ``saved_state`` (the cache of warm-start states), ``run_state`` (pausing
a QMP machine), ``port_forward`` (forwarded guest ports, ``Capability.PORT_FORWARD``).

The rule: a module is in :mod:`pytest_adare.qemu` iff only the QEMU backend uses it;
what another backend or a host layer uses is here. Nothing here imports a backend.
"""
