"""The serial link: DV frames over a virtio-serial port or a UART (docs/serial-link.md).

:mod:`~adare_guest.serial.link` holds both sides' state machines (sans-I/O; the host's
client uses its ``HostLink``); :mod:`~adare_guest.serial.transport` is the agent's
device loop around the guest side.
"""
