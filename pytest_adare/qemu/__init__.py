"""The QEMU layer: one emulated machine and the channels QEMU itself offers.

``machine`` (lifecycle, QMP, console, snapshots, input), ``argv`` (the pure
command line), ``accel`` (KVM or TCG), ``reaper`` (no QEMU outlives pytest),
``console`` (serial console capture), ``input_events`` (QMP input payloads),
``qga`` (the QEMU guest agent client). Nothing here knows the adare agent.
"""
