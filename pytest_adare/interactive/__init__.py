"""Stepping inside running VMs: the per-user registry of reachable VMs, the owner's
socket that serves terminals and screenshots, and the ``adare-vm`` command
(docs/debugging.md)."""
