"""A real MCP SDK client gets the images a run_code program shows as ImageContent blocks."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

# A GIF89a's header: 3x2 pixels (all the magic check and the size read look at).
GIF = b"GIF89a\x03\x00\x02\x00\x00\x00\x00;"


async def test_run_code_returns_the_image_after_its_text(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state")}
    args = ["-m", "codemode", "mcp", "--workspace", str(tmp_path / "ws"), "--tools", "code"]
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    b64 = base64.b64encode(GIF).decode()
    with anyio.fail_after(90):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ran = await session.call_tool(
                "run_code", {"code": f"image('{b64}', 'image/gif'); print('a chart')"}
            )
    assert not ran.is_error
    text, picture = ran.content
    assert isinstance(text, types.TextContent) and text.text == "a chart\n"
    assert isinstance(picture, types.ImageContent)
    assert (picture.mime_type, picture.data) == ("image/gif", b64)
