"""DV serial frame codec (DESIGN §4): pure, sans-I/O.

>>> from frame_codec import Kind, encode_frame, decode_frame
>>> decode_frame(encode_frame(Kind.REQUEST, b"ping")).payload
b'ping'
"""

from frame_codec.codec import (
    MAX_REQUEST_PAYLOAD,
    MAX_RESPONSE_PAYLOAD,
    Frame,
    Kind,
    Limits,
    decode_frame,
    encode_frame,
)
from frame_codec.crc import crc16_ccitt_false
from frame_codec.decoder import DecodeEvent, FrameDecoder
from frame_codec.errors import FrameError, FrameTooLarge, MalformedFrame, PartialFrame

__all__ = [
    "MAX_REQUEST_PAYLOAD",
    "MAX_RESPONSE_PAYLOAD",
    "DecodeEvent",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "Kind",
    "Limits",
    "MalformedFrame",
    "PartialFrame",
    "crc16_ccitt_false",
    "decode_frame",
    "encode_frame",
]
