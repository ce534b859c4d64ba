"""The QEMU backend: one QEMU process started here, and the channels QEMU itself offers.

``backend`` (the registry's entry), ``machine`` (lifecycle, QMP, console, snapshots,
input), ``argv`` (the pure command line), ``firmware`` (SeaBIOS/OVMF, boot watch),
``qemu_img``, ``migration``, ``memory_dump``, ``capture``, ``share`` (a shared folder's
disk). Only the QEMU backend uses what is here; what other backends and the host use
too (QGA, the accelerator, the reaper, disk export, screen, saved states, port forwards)
is in :mod:`pytest_adare.machine_tools`. Nothing outside a backend imports this
package (an import-linter contract). Nothing here knows the adare agent.
"""
