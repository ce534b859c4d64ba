"""Machines on a network: private layer-2 segments between guests (docs/networks.md).

:mod:`.port` (one guest's NIC on a segment, a leaf the options and backends read),
:mod:`.addressing` (the pure plan: subnet, addresses, MACs, ``/etc/hosts``),
:mod:`.pcap` (a bounded pcap writer), :mod:`.forwarder` (the host's hub joining the
members' Unix datagram sockets, the capture point), :mod:`.guest_config` (the
commands that put a member on the segment) and :mod:`.segment` (:class:`~.segment.Lan`,
what ``adare_lan`` hands out). Nothing is imported here: the options import
:mod:`.port` without the VM layer.
"""
