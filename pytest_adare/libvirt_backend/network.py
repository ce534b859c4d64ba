"""A LAN segment on a libvirt hypervisor: one transient, isolated network per LAN.

The network is a bridge on the hypervisor's host with no ``<forward>`` and no ``<ip>``
(:func:`~.domain_xml.build_network_xml`): the members reach each other and nothing
else, and no DHCP or DNS server runs on it. Its name says who made it
(:func:`~.reaper.new_network_name`), so a killed run's network is removed by the
reaper like its domains; a run that ends removes its own with :meth:`close`.

Example::

    network = LibvirtNetwork("qemu:///system", lan_index=0).create()
    port = lan_port(0, mac, network=network.name)   # a member's NIC on it
    ...
    network.close()
"""

from __future__ import annotations

import contextlib
from typing import Any

from pytest_adare.libvirt_backend.connection import (
    HypervisorError,
    error_text,
    libvirt_module,
    open_connection,
)
from pytest_adare.libvirt_backend.domain_xml import build_network_xml
from pytest_adare.libvirt_backend.reaper import new_network_name


class LibvirtNetwork:
    """The isolated network of one LAN on the daemon at ``uri`` (see the module)."""

    def __init__(self, uri: str, lan_index: int) -> None:
        self.uri = uri
        self.name = new_network_name(lan_index)
        self._conn: Any = None
        self._network: Any = None

    def create(self) -> LibvirtNetwork:
        """Start the network (transient: it goes when destroyed or the daemon stops).

        :raise VMLaunchError: the hypervisor cannot be reached or refused the network.
        """
        libvirt = libvirt_module()
        self._conn = open_connection(self.uri)
        try:
            self._network = self._conn.networkCreateXML(build_network_xml(self.name))
        except libvirt.libvirtError as exc:
            self.close()
            raise HypervisorError(
                f"libvirt ({self.uri}) could not create the LAN network {self.name}: "
                f"{error_text(exc)}"
            ) from None
        return self

    def close(self) -> None:
        """Remove the network and close the connection (safe to call twice)."""
        libvirt = libvirt_module()
        if self._network is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self._network.destroy()
            self._network = None
        if self._conn is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self._conn.close()
            self._conn = None
