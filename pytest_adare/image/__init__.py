"""Guest images and what the host hands a guest at boot.

``manifest`` (the ``adare-image.json`` format; a leaf), ``resolve`` (an
``--adare-vm`` spec → manifest), ``cache`` (built images by recipe hash),
``build`` / ``rootfs`` / ``initrd`` / ``recipe`` (building the built-in Debian
images from packages), ``agent_bundle`` (the agent as a zip, cached by
content). The ``adare-image`` command is :mod:`pytest_adare.image_cli`.
"""
