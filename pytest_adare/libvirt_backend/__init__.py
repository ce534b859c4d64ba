"""The libvirt machine backend: the same VMs on a hypervisor that libvirt hosts.

``VMOptions(hypervisor="qemu:///system")`` (``--adare-hypervisor``) makes the VM run its
guest as a transient libvirt domain instead of a QEMU process of its own. The parts:

- :mod:`.domain_xml` — pure builders: the domain, pool, volume and snapshot XML from a
  frozen :class:`~.domain_xml.DomainConfig`, and the pool's volume names.
- :mod:`.connection` — opening a URI (``libvirt`` imported there, on first use).
- :mod:`.storage` — the ``adare`` storage pool: content-addressed base volumes uploaded
  once, per-VM qcow2 overlays and boot files.
- :mod:`.streams` — libvirt streams (serial consoles, virtio-serial channels) bridged to
  local Unix sockets, so the serial agent client and QGA client work unchanged.
- :mod:`.machine` — :class:`~.machine.LibvirtMachine`, the methods the VM uses of a
  :class:`~pytest_adare.qemu.machine.Machine`, done through libvirt.

Importing this package does not import ``libvirt``.
"""
