"""A bounded classic-pcap writer (Ethernet link type; tcpdump, Wireshark and dpkt read it).

Frames are cut at ``snaplen`` bytes; once the file would pass ``max_bytes`` no more
frames are written and :attr:`PcapWriter.truncated` says so. The segment's traffic is the
guests' to decide, so the host bounds what it keeps.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

from pytest_adare.machine.results import CAPTURE_MAX_BYTES, CAPTURE_SNAPLEN, new_file_target

LINKTYPE_ETHERNET = 1
_HEADER = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """One pcap file being written; :meth:`write` is safe from any thread."""

    def __init__(
        self, path: str | Path, *, snaplen: int = CAPTURE_SNAPLEN,
        max_bytes: int = CAPTURE_MAX_BYTES,
    ) -> None:  # fmt: skip
        """:raise FileExistsError: ``path`` exists (evidence never overwrites a file).
        :raise ValueError: ``snaplen`` or ``max_bytes`` out of range."""
        if not 64 <= snaplen <= 262144 or max_bytes < _HEADER.size:
            raise ValueError(
                f"snaplen must be 64..262144 and max_bytes >= 24, got {snaplen}, {max_bytes}"
            )
        self.path = new_file_target(path)
        self.snaplen = snaplen
        self.max_bytes = max_bytes
        self.frames = 0
        self.truncated = False
        self.started_at = time.time()
        self.stopped_at: float | None = None
        self._lock = threading.Lock()
        self._file = open(self.path, "xb", buffering=0)
        self._file.write(_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self._size = _HEADER.size

    def write(self, frame: bytes, at: float | None = None) -> None:
        """Append one frame (seen at ``at``, default now) unless the file is full or closed."""
        moment = time.time() if at is None else at
        data = frame[: self.snaplen]
        record = _RECORD.pack(int(moment), int(moment % 1 * 1e6), len(data), len(frame))
        with self._lock:
            if self.stopped_at is not None or self.truncated:
                return
            if self._size + len(record) + len(data) > self.max_bytes:
                self.truncated = True
                return
            self._file.write(record + data)
            self._size += len(record) + len(data)
            self.frames += 1

    def close(self) -> None:
        """Stop writing and close the file (safe to call twice)."""
        with self._lock:
            if self.stopped_at is None:
                self.stopped_at = time.time()
                self._file.close()
