"""The agent's own WebSocket server (RFC 6455), standard library only, Python 3.9 and up.

:mod:`~adare_guest.websocket.handshake` and :mod:`~adare_guest.websocket.frames` are
sans-I/O cores (bytes in, events and bytes out); :mod:`~adare_guest.websocket.connection`
and :mod:`~adare_guest.websocket.server` move their bytes over asyncio.
"""
