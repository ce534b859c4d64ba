"""The server side of the WebSocket opening handshake (RFC 6455 §4.2), sans-I/O.

:class:`RequestReader` takes the bytes a client sends first and returns its HTTP/1.1
request once the blank line that ends the head arrives. It holds at most
:data:`MAX_HEAD_BYTES` of head and :data:`MAX_HEADERS` header lines; more, or a head
that is not ``GET <target> HTTP/1.1`` followed by ``name: value`` lines ending in
CRLF, raises :class:`HandshakeError` (431 for a head over the limits, else 400).
Bytes after the head (the client's first frames) are kept in ``leftover``.

:func:`check_upgrade` then decides whether the request asks for a WebSocket:
``Host`` once, ``Upgrade`` naming ``websocket``, ``Connection`` naming ``upgrade``
(token lists, ASCII case-insensitive), one ``Sec-WebSocket-Key`` that is base64 of 16
bytes (else 400) and ``Sec-WebSocket-Version: 13`` (another version: 426 naming 13).
No extension and no subprotocol is ever negotiated. :func:`switching_protocols`
is the 101 answer, :class:`HttpResponse` any other.

Header values are decoded as latin-1, so every byte the client sent maps to one
character (``value.encode("latin-1")`` gives the bytes back).

>>> reader = RequestReader()
>>> request = reader.feed(
...     b"GET /agent HTTP/1.1\\r\\nHost: guest\\r\\nUpgrade: websocket\\r\\n"
...     b"Connection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n"
...     b"Sec-WebSocket-Version: 13\\r\\n\\r\\n"
... )
>>> request.path, check_upgrade(request)
('/agent', 'dGhlIHNhbXBsZSBub25jZQ==')
>>> accept_key("dGhlIHNhbXBsZSBub25jZQ==")
's3pPLMBiTxaQ9kYGzzhZRbK+xOo='
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Iterator, Sequence

MAX_HEAD_BYTES = 16 * 1024
"""Bytes of request line and headers (blank line included) a client may send."""
MAX_HEADERS = 128
"""Header lines a request may have."""
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455's constant that ``Sec-WebSocket-Accept`` hashes with the client's key."""
WEBSOCKET_VERSION = "13"

# Byte classes of RFC 9110, checked with bytes.translate (no regex to compile at start-up).
_TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_VISIBLE = bytes(range(0x21, 0x7F))
_FIELD_CHAR = b"\t " + _VISIBLE + bytes(range(0x80, 0x100))  # no other control byte
_END_OF_HEAD = b"\r\n\r\n"
_REASON_PHRASES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
BAD_REQUEST = 400
UPGRADE_REQUIRED = 426
HEADERS_TOO_LARGE = 431


def _only(data: bytes, allowed: bytes) -> bool:
    """Whether every byte of ``data`` is one of ``allowed``."""
    return not data.translate(None, allowed)


class HandshakeError(Exception):
    """A request the server refuses: :meth:`response` is the HTTP answer to send."""

    def __init__(self, status: int, reason: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = tuple(headers)

    def response(self) -> HttpResponse:
        """The HTTP error response naming :attr:`reason`."""
        return HttpResponse.text(self.status, self.reason, self.headers)


class Headers:
    """Header fields in arrival order; names compare ASCII case-insensitively.

    >>> Headers([("Upgrade", "websocket"), ("upgrade", "h2c")]).get_all("UPGRADE")
    ['websocket', 'h2c']
    """

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = list(items)

    def get_all(self, name: str) -> list[str]:
        """Every value of header ``name`` (none: an empty list)."""
        wanted = name.lower()
        return [value for key, value in self._items if key.lower() == wanted]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class Request:
    """An HTTP request head: ``GET`` of ``path`` (request target) with ``headers``."""

    __slots__ = ("headers", "path")

    def __init__(self, path: str, headers: Headers) -> None:
        self.path = path
        self.headers = headers

    def __repr__(self) -> str:
        return f"Request(path={self.path!r}, headers={self.headers!r})"


class HttpResponse:
    """An HTTP/1.1 response that ends the connection (any status but 101)."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, headers: Iterable[tuple[str, str]] = (), body: bytes = b""
    ) -> None:
        self.status = status
        self.headers = tuple(headers)
        self.body = body

    def __repr__(self) -> str:
        return f"HttpResponse({self.status}, {self.headers!r}, {self.body!r})"

    @classmethod
    def text(
        cls, status: int, message: str, headers: Iterable[tuple[str, str]] = ()
    ) -> HttpResponse:
        """A response whose body is ``message`` (plain text, one line)."""
        return cls(status, headers, f"{message}\n".encode())

    def serialize(self) -> bytes:
        """The response's bytes: status line, headers, ``Content-Length``, body."""
        phrase = _REASON_PHRASES.get(self.status, "Error")
        lines = [f"HTTP/1.1 {self.status} {phrase}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines += [
            "Content-Type: text/plain; charset=utf-8",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


class RequestReader:
    """Collects one request head from the bytes a client sends (bounded).

    :meth:`feed` returns ``None`` until the head is complete, then the
    :class:`Request`; bytes after the head stay in :attr:`leftover`. Feeding after
    the request was returned only adds to :attr:`leftover`.
    """

    def __init__(
        self, *, max_head_bytes: int = MAX_HEAD_BYTES, max_headers: int = MAX_HEADERS
    ) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_headers = max_headers
        self._buffer = bytearray()
        self._request: Request | None = None

    @property
    def leftover(self) -> bytes:
        """Bytes received after the head (empty before the head is complete)."""
        return bytes(self._buffer) if self._request is not None else b""

    def feed(self, data: bytes) -> Request | None:
        """Take the next bytes; the request once its head is complete, else None.

        :raise HandshakeError: a malformed head (400) or one over the limits (431).
        """
        if self._request is not None:
            self._buffer += data
            return None
        # Look for the end only where it can be: in the new bytes and the 3 before them.
        start = max(0, len(self._buffer) - 3)
        self._buffer += data
        end = self._buffer.find(_END_OF_HEAD, start)
        if end < 0:
            if len(self._buffer) >= self.max_head_bytes:
                raise HandshakeError(
                    HEADERS_TOO_LARGE, f"request head over {self.max_head_bytes} bytes"
                )
            return None
        head_size = end + len(_END_OF_HEAD)
        if head_size > self.max_head_bytes:
            raise HandshakeError(
                HEADERS_TOO_LARGE, f"request head over {self.max_head_bytes} bytes"
            )
        request = parse_request_head(bytes(self._buffer[:end]), self.max_headers)
        del self._buffer[:head_size]
        self._request = request
        return request


def parse_request_head(head: bytes, max_headers: int = MAX_HEADERS) -> Request:
    """Parse a request line and header lines (CRLF-separated, no final blank line).

    :raise HandshakeError: 400 naming what is wrong; 431 for over ``max_headers`` lines.
    """
    request_line, *lines = head.split(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise _bad_request("the request line is not 'GET <path> HTTP/1.1'")
    method, target, version = parts
    if method != b"GET":
        raise _bad_request("only GET opens a WebSocket")
    if version != b"HTTP/1.1":
        raise _bad_request("HTTP/1.1 is required")
    if not target.startswith(b"/") or not _only(target, _VISIBLE):
        raise _bad_request("the request target must be a path starting with '/'")
    if len(lines) > max_headers:
        raise HandshakeError(HEADERS_TOO_LARGE, f"more than {max_headers} headers")
    return Request(target.decode("ascii"), Headers(_parse_header(line) for line in lines))


def _parse_header(line: bytes) -> tuple[str, str]:
    name, colon, value = line.partition(b":")
    if not colon or not name or not _only(name, _TCHAR):
        raise _bad_request("a header line is not 'name: value'")
    value = value.strip(b" \t")
    if not _only(value, _FIELD_CHAR):
        raise _bad_request(f"header {name.decode('ascii')!r} holds a control character")
    return name.decode("ascii"), value.decode("latin-1")


def _bad_request(reason: str) -> HandshakeError:
    return HandshakeError(BAD_REQUEST, reason)


def _tokens(headers: Headers, name: str) -> list[str]:
    """The comma-separated tokens of every ``name`` header, lower-cased."""
    return [
        token.strip().lower()
        for value in headers.get_all(name)
        for token in value.split(",")
        if token.strip()
    ]


def check_upgrade(request: Request) -> str:
    """The ``Sec-WebSocket-Key`` of a valid WebSocket upgrade request.

    :raise HandshakeError: 400 naming the bad or missing header; 426 (with
        ``Sec-WebSocket-Version: 13``) for a version other than 13.
    """
    headers = request.headers
    if len(headers.get_all("Host")) != 1:
        raise _bad_request("exactly one Host header is required")
    if "websocket" not in _tokens(headers, "Upgrade"):
        raise _bad_request("'Upgrade: websocket' is required")
    if "upgrade" not in _tokens(headers, "Connection"):
        raise _bad_request("'Connection: Upgrade' is required")
    versions = headers.get_all("Sec-WebSocket-Version")
    if not versions:
        raise _bad_request("Sec-WebSocket-Version is missing")
    if versions != [WEBSOCKET_VERSION]:
        raise HandshakeError(
            UPGRADE_REQUIRED,
            f"WebSocket version {WEBSOCKET_VERSION} is required",
            [("Sec-WebSocket-Version", WEBSOCKET_VERSION)],
        )
    keys = headers.get_all("Sec-WebSocket-Key")
    if len(keys) != 1:
        raise _bad_request("exactly one Sec-WebSocket-Key header is required")
    key = keys[0]
    try:
        nonce = base64.b64decode(key.encode("latin-1"), validate=True)
    except (binascii.Error, ValueError):
        nonce = b""
    if len(nonce) != 16:
        raise _bad_request("Sec-WebSocket-Key is not base64 of 16 bytes")
    return key


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for ``key``: base64(sha1(key + GUID))."""
    digest = hashlib.sha1((key + WEBSOCKET_GUID).encode("latin-1"), usedforsecurity=False)
    return base64.b64encode(digest.digest()).decode("ascii")


def switching_protocols(key: str) -> bytes:
    """The 101 response that accepts the upgrade of the request with ``key``."""
    return (
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n"
    ).encode("ascii")
