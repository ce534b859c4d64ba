"""Helpers of the hypervisor-evidence tests: a loopback HTTP server the guest reaches at
10.0.2.2, and readers for what QEMU wrote (pcap via dpkt, ELF program headers)."""

from __future__ import annotations

import http.server
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

GUEST_HOST_ADDRESS = "10.0.2.2"
"""The host as QEMU user networking shows it to the guest (its loopback)."""
PT_LOAD = 1


@dataclass
class LoopbackServer:
    """A one-page HTTP server bound to 127.0.0.1; ``requests`` holds the paths asked for."""

    port: int
    body: bytes
    requests: list[str] = field(default_factory=list)
    posted: list[bytes] = field(default_factory=list)

    def url_from_guest(self, path: str) -> str:
        return f"http://{GUEST_HOST_ADDRESS}:{self.port}{path}"


@contextmanager
def loopback_http_server(body: bytes = b"adare says hello\n") -> Iterator[LoopbackServer]:
    """Serve GET (``body``) and POST (recorded) on 127.0.0.1; stops after the block."""
    state = LoopbackServer(0, body)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def do_POST(self) -> None:
            length = min(int(self.headers.get("Content-Length", "0")), 1 << 20)
            state.requests.append(self.path)
            state.posted.append(self.rfile.read(length))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@dataclass(frozen=True)
class TcpPayload:
    src: str
    dst: str
    sport: int
    dport: int
    data: bytes


def tcp_payloads(pcap: Path) -> list[TcpPayload]:
    """Every TCP segment with data in an Ethernet pcap (IPv4), in capture order."""
    found: list[TcpPayload] = []
    with pcap.open("rb") as stream:
        for _, frame in dpkt.pcap.Reader(stream):
            ip = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            if tcp.data:
                found.append(TcpPayload(
                    dpkt.utils.inet_to_str(ip.src), dpkt.utils.inet_to_str(ip.dst),
                    tcp.sport, tcp.dport, bytes(tcp.data),
                ))  # fmt: skip
    return found


def elf_load_segments(path: Path) -> list[tuple[int, int, int]]:
    """``(physical address, size in memory, file offset)`` of each PT_LOAD of an ELF64."""
    with path.open("rb") as stream:
        header = stream.read(64)
        assert header[:4] == b"\x7fELF" and header[4] == 2, "not an ELF64 file"
        phoff, = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        stream.seek(phoff)
        table = stream.read(phentsize * phnum)
    segments = []
    for index in range(phnum):
        p_type, _, p_offset, _, p_paddr, _, p_memsz, _ = struct.unpack_from(
            "<IIQQQQQQ", table, index * phentsize
        )
        if p_type == PT_LOAD:
            segments.append((p_paddr, p_memsz, p_offset))
    return segments


def file_contains(path: Path, needle: bytes, chunk: int = 1 << 24) -> bool:
    """True when ``needle`` occurs in the file (read in chunks that overlap)."""
    tail = b""
    with path.open("rb") as stream:
        while block := stream.read(chunk):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False
