"""The agent layer: reaching the adare agent in a guest and talking to it.

``connection`` (the ``AgentConnection`` protocol every client satisfies),
``call_router`` (the transport-independent half of a client),
``websocket_client`` and ``serial_client`` (the two transports), ``install``
(getting the bundle and its config into a guest), ``diagnosis`` (why an agent
cannot be reached), ``testfunction_upload`` (collections as a checked zip),
``desktop_ready`` (a desktop guest's session is usable). Built on the QEMU
layer (QGA), never on the guest facade above it.
"""
