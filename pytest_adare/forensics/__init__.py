"""The forensics layer: what a guest's file system looked like and what changed.

``entry`` (one file's metadata, validated; a leaf), ``snapshot``
(``FsSnapshot``: a read-only mapping path → entry, saved as JSON Lines),
``diff`` (``FsDiff``: created, deleted, modified), ``export`` (json, csv and
bodyfile writers), ``assertrepr`` (pytest's explanation of a failed diff
assert), ``evidence`` (pulling changed files out of the guest, contained).
Pure data and files on the host: no QEMU, no agent connection.
"""
