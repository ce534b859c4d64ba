"""A screenshot PNG whose header claims a huge image is refused before decoding."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from typing import Any

import pytest
from PIL import Image

from pytest_adare.agent.screen import MAX_SCREENSHOT_PIXELS, AgentScreen, decode_screenshot
from pytest_adare.errors import ToolError


def png_claiming(width: int, height: int, idat: bytes = b"") -> bytes:
    """A PNG header (IHDR, RGBA) for ``width`` x ``height`` and whatever data follows."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def agent_sending(png: bytes) -> AgentScreen:
    async def call(tool: str, /, **params: Any) -> dict[str, Any]:
        return {"image": {"data": base64.b64encode(png).decode()}}

    return AgentScreen(call)


@pytest.mark.asyncio
async def test_a_png_declaring_13000_by_13000_is_refused_before_decoding() -> None:
    bomb = png_claiming(13000, 13000, zlib.compress(b"\0" * 65536))
    with pytest.raises(ToolError, match=r"declares 13000x13000 pixels, above the host's bound"):
        await agent_sending(bomb).screenshot()


def test_the_bound_is_an_8k_screen_and_a_real_screenshot_passes() -> None:
    assert MAX_SCREENSHOT_PIXELS == 7680 * 4320
    out = io.BytesIO()
    Image.new("RGB", (1024, 768), "navy").save(out, "PNG")
    assert decode_screenshot(out.getvalue()).size == (1024, 768)
    with pytest.raises(ToolError, match=r"declares 1024x768 pixels, above .* of 1000"):
        decode_screenshot(out.getvalue(), max_pixels=1000)


@pytest.mark.asyncio
async def test_bytes_that_are_no_png_are_a_clear_error() -> None:
    with pytest.raises(ToolError, match="the agent sent no readable PNG"):
        await agent_sending(b"GIF89a not a png").screenshot()
