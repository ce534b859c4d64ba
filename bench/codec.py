"""Frame codec throughput: our C-backed CRC beside the same codec on a pure-Python CRC.

Prints one JSON object. For each payload size (64 B and each kind's maximum) and each
operation (``encode_frame``, ``decode_frame``, a ``FrameDecoder`` fed a stream of frames)
it gives MB/s of payload and frames/s with ``binascii.crc_hqx`` and with the ``crc``
package (pure Python, table-driven), measured in the same run, and their ratio.

Run: ``python bench/codec.py [--seconds 0.3]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable

import crc

from frame_codec import (
    MAX_REQUEST_PAYLOAD,
    MAX_RESPONSE_PAYLOAD,
    FrameDecoder,
    Kind,
    crc16_ccitt_false,
    decode_frame,
    encode_frame,
)
from frame_codec.crc import BytesLike, Checksum

STREAM_FRAMES = 64


def pure_python_crc() -> Checksum:
    """CRC-16/CCITT-FALSE from the ``crc`` package (catalogue name CRC-16/IBM-3740)."""
    calculator = crc.Calculator(crc.Crc16.IBM_3740.value, optimized=True)
    check = calculator.checksum(b"123456789")
    assert check == crc16_ccitt_false(b"123456789") == 0x29B1, hex(check)

    def checksum(data: BytesLike) -> int:
        return calculator.checksum(bytes(data))

    return checksum


def rate(operation: Callable[[], int], seconds: float) -> float:
    """Frames per second of ``operation`` (which returns how many frames it handled)."""
    frames, started = 0, time.perf_counter()
    while True:
        frames += operation()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return frames / elapsed


def operations(kind: Kind, size: int, checksum: Checksum) -> dict[str, Callable[[], int]]:
    payload = os.urandom(size)
    wire = encode_frame(kind, payload, checksum=checksum)
    stream = wire * STREAM_FRAMES

    def encode() -> int:
        encode_frame(kind, payload, checksum=checksum)
        return 1

    def decode() -> int:
        decode_frame(wire, checksum=checksum)
        return 1

    def stream_decode() -> int:
        events = FrameDecoder(checksum=checksum).feed(stream)
        assert len(events) == STREAM_FRAMES
        return STREAM_FRAMES

    return {"encode": encode, "decode": decode, "stream_decode": stream_decode}


def measure(seconds: float) -> dict[str, object]:
    pure = pure_python_crc()
    cases = [
        ("request_64B", Kind.REQUEST, 64),
        ("request_max", Kind.REQUEST, MAX_REQUEST_PAYLOAD),
        ("response_max", Kind.RESPONSE, MAX_RESPONSE_PAYLOAD),
    ]
    results: dict[str, object] = {}
    for name, kind, size in cases:
        ours = operations(kind, size, crc16_ccitt_false)
        theirs = operations(kind, size, pure)
        for op in ours:
            fast = rate(ours[op], seconds)
            slow = rate(theirs[op], seconds)
            results[f"{name}.{op}"] = {
                "payload_bytes": size,
                "binascii_crc": {"frames_per_s": round(fast), "MB_per_s": mb(fast, size)},
                "pure_python_crc": {"frames_per_s": round(slow), "MB_per_s": mb(slow, size)},
                "speedup": round(fast / slow, 2),
            }
    return results


def mb(frames_per_s: float, size: int) -> float:
    return round(frames_per_s * size / 1e6, 2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    args = parser.parse_args(argv)
    report = {
        "benchmark": "frame_codec",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "seconds_per_measurement": args.seconds,
        "results": measure(args.seconds),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
