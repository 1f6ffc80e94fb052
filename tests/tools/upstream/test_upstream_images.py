"""An image a mounted server's tool returns (the SDK-written test server's ``picture``): a
program shows it with ``image(block)``; a direct call passes it on to an MCP client and to the
adapters as image content."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, types

from codemode import Host
from codemode.adapters import HostTools
from codemode.adapters import anthropic as anthropic_adapter
from codemode.mcp import create_server
from tests.tools.upstream.upstream_support import stdio_server

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

# What upstream_server.py's picture tool returns: a 1x1 PNG's signature and IHDR.
PICTURE = base64.b64encode(
    bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")
).decode()


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    (tmp_path / "ws").mkdir()
    servers = {"mcpServers": {"up": stdio_server()}}
    async with Host(
        workspace=tmp_path / "ws", state_dir=tmp_path / "state", mcp_servers=servers, connect_mcp_at_open=True
    ) as opened:
        yield opened


async def test_a_program_shows_the_image_a_tool_returned(host: Host) -> None:
    with anyio.fail_after(60):
        result = await host.run_code(
            'const r = await tools.up.picture(); image(r.find(b => b.type === "image")); print(r[0].bytes)'
        )
    assert result.ok, result.text
    assert result.text.strip() == "33"
    assert [(i.mime_type, i.data, i.tokens) for i in result.images] == [("image/png", PICTURE, 1)]


async def test_a_direct_call_passes_the_image_to_an_mcp_client(host: Host) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(host, surface="all")) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert "up__picture" in listed
            called = await client.call_tool("up__picture", {})
    assert not called.is_error
    text, picture = called.content
    assert isinstance(text, types.TextContent) and '"type": "image"' in text.text and "ar_" in text.text
    assert isinstance(picture, types.ImageContent)
    assert (picture.mime_type, picture.data) == ("image/png", PICTURE)


async def test_a_direct_call_through_an_adapter_gives_its_image_block(host: Host) -> None:
    tools = HostTools(host, surface="all")
    with anyio.fail_after(60):
        (block,) = await anthropic_adapter.tool_results(
            tools, [{"type": "tool_use", "id": "u1", "name": "up__picture", "input": {}}]
        )
    content = block["content"]
    assert isinstance(content, list)  # text and an image: blocks, not a plain string
    text, image = content
    assert text["type"] == "text" and "ar_" in text["text"]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PICTURE},
    }


async def test_a_direct_call_result_carries_the_image_with_its_cost(host: Host) -> None:
    with anyio.fail_after(60):
        shown = await host.call_tool("up.picture", {})
        assert [(i.mime_type, i.tokens) for i in shown.images] == [("image/png", 1)]
        # A tool that returns no image shows none; codemode's own tools never do.
        plain = await host.call_tool("up.echo", {"text": "hi"})
    assert plain.images == [] and not plain.is_error
