"""The Sleuth Kit's ``fls -r -p`` listing as records: one per directory entry, deleted
ones included (Debian package ``sleuthkit``).

A line is ``TYPE [*] INODE[(realloc)]:<TAB>PATH``: ``r/r 27:\\thome/user/a.txt``, a
deleted entry ``r/r * 27:\\thome/user/a.txt`` (``*``), one whose inode is in use again
``(realloc)``. ``-p`` is needed: without it fls prints names without their directories.

>>> parse_fls("d/d 16:\\thome\\nr/r * 27(realloc):\\thome/a.txt\\n")
[{'path': '/home', 'type': 'd/d', 'inode': 16, 'deleted': False, 'reallocated': False}, \
{'path': '/home/a.txt', 'type': 'r/r', 'inode': 27, 'deleted': True, 'reallocated': True}]
"""

from __future__ import annotations

import re

from pytest_adare.analysis.records import PlainRecord

FLS_LINE = re.compile(
    r"(?P<type>[-\w]/[-\w]+)\s+(?P<deleted>\*\s+)?(?P<inode>\d+)(?:-\d+-\d+)?"
    r"(?P<realloc>\(realloc\))?:\t(?P<path>.*)"
)


def parse_fls(text: str, under: str = "/") -> list[PlainRecord]:
    """The entries of an ``fls -r -p`` listing at or below ``under``.

    :raise ValueError: a line that is not an fls entry (naming its number), e.g. a
        listing made without ``-p`` (its lines start with ``+``).
    """
    prefix = under.rstrip("/") + "/"
    records: list[PlainRecord] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        match = FLS_LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"fls output line {number} is not an entry (made with -p?): {line!r}")
        path = "/" + match["path"]
        if not (path + "/").startswith(prefix):
            continue
        records.append({
            "path": path,
            "type": match["type"],
            "inode": int(match["inode"]),
            "deleted": match["deleted"] is not None,
            "reallocated": match["realloc"] is not None,
        })  # fmt: skip
    return records
