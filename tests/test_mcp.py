"""The MCP server, through a real MCP client over stdio (a `codemode mcp` subprocess)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(tmp_path: Path) -> StdioServerParameters:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    env = dict(os.environ)
    env["CODEMODE_HOME"] = str(tmp_path / "state")
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "codemode", "mcp", "--workspace", str(workspace), "--session", "mcp-test"],
        env=env,
    )


async def test_lists_run_code_and_tools_and_runs_a_program(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with stdio_client(_params(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            names = {t.name for t in listed.tools}
            assert {"run_code", "bash", "read_file", "edit_file", "write_file", "read_archive"} <= names
            run_code = next(t for t in listed.tools if t.name == "run_code")
            assert run_code.description is not None and "tools.read_file" in run_code.description

            result = await session.call_tool(
                "run_code",
                {
                    "code": 'const f = await tools.read_file({path: "notes.txt"}); print(f.content.split("\\n")[1])'
                },
            )
            assert isinstance(result, types.CallToolResult)
            assert not result.is_error
            text = result.content[0]
            assert isinstance(text, types.TextContent) and text.text.strip() == "beta"

            failed = await session.call_tool("run_code", {"code": "throw new TypeError('nope')"})
            assert isinstance(failed, types.CallToolResult) and failed.is_error
            first = failed.content[0]
            assert isinstance(first, types.TextContent) and "TypeError: nope" in first.text

            direct = await session.call_tool("bash", {"command": "echo direct"})
            assert isinstance(direct, types.CallToolResult) and not direct.is_error
            assert isinstance(direct.structured_content, dict)
            assert direct.structured_content["exit_code"] == 0

            unknown = await session.call_tool("no_such_tool", {})
            assert isinstance(unknown, types.CallToolResult) and unknown.is_error
            message = unknown.content[0]
            assert isinstance(message, types.TextContent) and "searchTools" in message.text
