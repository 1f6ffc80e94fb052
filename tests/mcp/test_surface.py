"""What a client lists (`codemode._surface`): surfaces, their sizes, names, stability."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codemode import Host
from codemode._surface import NAME_PATTERN, listed_names, shallow_output_schema
from codemode.adapters import HostTools
from codemode.budget import TokenCounter
from codemode.mcp import create_server
from codemode.mcp._server import RUN_CODE_OUTPUT_SCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

UPSTREAM = Path(__file__).resolve().parents[1] / "tools" / "upstream" / "upstream_server.py"

# Targets in o200k tokens (exact only with tiktoken's cache), and byte bounds that always hold
# today with room to spare (a token is at least one byte, so they bound growth, not tokens).
TOKEN_TARGETS = {"default": 3000, "default+outputs": 4000, "code": 1000, "description": 1000}
BYTE_BOUNDS = {"default": 12_500, "default+outputs": 16_000, "code": 4_000, "description": 4_000}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _listing(result: types.ListToolsResult) -> str:
    return json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools])


async def _list(host: Host, **options: Any) -> types.ListToolsResult:
    async with Client(create_server(host, **options)) as client:
        return await client.list_tools()


def _check_size(what: str, text: str, counter: TokenCounter) -> None:
    assert len(text.encode()) <= BYTE_BOUNDS[what], (what, len(text.encode()))
    if counter.exact:
        assert counter.count(text) <= TOKEN_TARGETS[what], (what, counter.count(text))


def test_listed_names_are_valid_distinct_and_independent_of_order() -> None:
    long = "server." + "t" * 80
    names = ["bash", "everything.echo", "everything__echo", "a.b!", "a.b?", "ü.tool", long, "x-y.z_1"]
    listed = listed_names(names)
    assert listed == listed_names(reversed(names))  # the set decides, not the order
    assert all(NAME_PATTERN.match(name) for name in listed.values())
    assert len(set(listed.values())) == len(names)
    assert listed["bash"] == "bash" and listed["everything__echo"] == "everything__echo"  # valid: kept
    assert listed["x-y.z_1"] == "x-y__z_1"
    # a clash with a valid name, or between two sanitised names, or too long: a hash suffix
    assert listed["everything.echo"].startswith("everything__echo_") and len(listed["everything.echo"]) == 23
    assert listed["a.b!"] != listed["a.b?"] and listed["a.b!"].startswith("a__b__")
    assert len(listed[long]) == 64 and listed[long].startswith("server__ttt")
    assert listed_names(["run_code.x", "run_code"])["run_code"] == "run_code"  # reserved stays


def test_shallow_output_schema_is_the_top_level_and_accepts_what_the_full_one_does() -> None:
    shallow = shallow_output_schema(RUN_CODE_OUTPUT_SCHEMA)
    assert set(shallow["required"]) >= {"ok", "text", "truncated", "refs", "error", "usage"}
    assert shallow["properties"]["error"] == {"type": ["null", "object"]}
    assert shallow["properties"]["refs"] == {"type": "array"}
    union = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "k": {"const": "x"}},
                "required": ["a", "k"],
            },
            {"$ref": "#/$defs/B"},
        ],
        "$defs": {"B": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
    }
    assert shallow_output_schema(union) == {
        "type": "object",
        "properties": {"a": {"type": ["integer", "string"]}, "k": {"type": "string"}},
        "required": ["a"],
    }


async def test_surfaces_list_what_they_say_within_their_targets(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    counter = TokenCounter()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        default = await _list(host)
        assert [t.name for t in default.tools] == [
            "run_code",
            "bash",
            "read_file",
            "edit_file",
            "write_file",
            "read_archive",
        ]
        assert all(t.output_schema is None for t in default.tools)
        _check_size("default", _listing(default), counter)
        _check_size("description", default.tools[0].description or "", counter)
        with_outputs = await _list(host, output_schemas=True)
        assert all(t.output_schema is not None for t in with_outputs.tools)
        _check_size("default+outputs", _listing(with_outputs), counter)
        code = await _list(host, surface="code")
        assert [t.name for t in code.tools] == ["run_code"]
        _check_size("code", _listing(code), counter)
        every = await _list(host, surface="all")
        assert {t.name for t in every.tools} == {"run_code", *host.registry.names()}
        assert all(NAME_PATTERN.match(t.name) for t in every.tools)
        with pytest.raises(Exception, match="unknown tool surface 'some'"):
            create_server(host, surface="some")  # type: ignore[arg-type]


async def test_code_surface_stays_small_with_five_thousand_tools(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    counter = TokenCounter()
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        for i in range(5000):
            host.add_tool(
                lambda: "x", name=f"svc{i // 100}_op_{i}", description=f"Operation {i} of service {i // 100}."
            )
        code = await _list(host, surface="code")
        assert [t.name for t in code.tools] == ["run_code"]
        description = code.tools[0].description or ""
        assert (
            "svc0 (100)" in description and "more groups" in description and "svc0_op_1 " not in description
        )
        _check_size("code", _listing(code), counter)
        _check_size("description", description, counter)


async def test_the_listing_is_byte_identical_across_calls_and_servers(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    listings = []
    for state in ("one", "two"):  # two hosts: a restart
        async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / state) as host:
            for options in ({}, {"surface": "all", "output_schemas": True}):
                first, second = await _list(host, **options), await _list(host, **options)
                assert _listing(first) == _listing(second)
                listings.append(_listing(first))
    assert listings[0] == listings[2] and listings[1] == listings[3]


async def test_adapters_offer_the_same_surface_and_call_by_listed_name(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("alpha\n")
    async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "state") as host:
        default = HostTools(host)
        assert [s.name for s in default.specs()] == [t.name for t in (await _list(host)).tools]
        assert [s.name for s in HostTools(host, surface="code").specs()] == ["run_code"]
        every = HostTools(host, surface="all")
        assert all(NAME_PATTERN.match(s.name) for s in every.specs())
        read = await default.call("read_file", {"path": "a.txt"})
        assert not read.is_error and "alpha" in read.text
        refused = await default.call("monitor_list", {})
        assert refused.is_error and "tools.monitor_list(args)" in refused.text
        assert refused.structured == {"code": "unknown_tool", "name": "monitor_list"}
        assert not (await every.call("monitor_list", {})).is_error


def _mcp_params(tmp_path: Path, *options: str) -> StdioServerParameters:
    config = tmp_path / "servers.json"
    server = {"command": sys.executable, "args": [str(UPSTREAM), "stdio"], "env": {"UPSTREAM_SECRET": "x"}}
    config.write_text(json.dumps({"mcpServers": {"up": server}}))
    env = {**os.environ, "CODEMODE_HOME": str(tmp_path / "state")}
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    args = ["-m", "codemode", "mcp", "--workspace", str(workspace), "--mcp-config", str(config), *options]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


def _text(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


async def test_tools_code_lists_run_code_alone_and_programs_reach_every_tool(tmp_path: Path) -> None:
    with anyio.fail_after(90):
        params = _mcp_params(tmp_path, "--tools", "code")
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert [t.name for t in (await session.list_tools()).tools] == ["run_code"]
            program = """
            const ran = await tools.bash({command: "seq 1 40000"});
            const ref = ran.log.ref;
            const page = await tools.read_archive({ref, offset: 0, limit: 12});
            print(JSON.stringify(page.text), await tools.up.echo({text: "mounted"}));
            """
            ran = await session.call_tool("run_code", {"code": program})
            assert not ran.is_error, _text(ran)
            assert _text(ran).strip() == '"1\\n2\\n3\\n4\\n5\\n6\\n" mounted'
            direct = await session.call_tool("bash", {"command": "echo no"})
            assert direct.is_error and "tools.bash(args)" in _text(direct) and "--tools all" in _text(direct)
            assert direct.structured_content == {"code": "unknown_tool", "name": "bash"}


async def test_tools_all_lists_mounted_tools_under_valid_names_and_calls_them(tmp_path: Path) -> None:
    with anyio.fail_after(90):
        params = _mcp_params(tmp_path, "--tools", "all")
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            assert "up__echo" in names and "up.echo" not in names and "monitor_start" in names
            assert all(NAME_PATTERN.match(name) for name in names)
            echoed = await session.call_tool("up__echo", {"text": "direct"})
            assert not echoed.is_error and _text(echoed) == "direct"


SYNTHETIC_SERVER = """
import sys, anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
prefix, count = sys.argv[1], int(sys.argv[2])
tools = [types.Tool(name=f"op_{i}", description=f"Operation {i}.", input_schema={"type": "object"})
         for i in range(count)]
async def list_tools(ctx, params):
    return types.ListToolsResult(tools=tools)
async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text=prefix + " " + params.name)])
server = Server(prefix, on_list_tools=list_tools, on_call_tool=call_tool)
async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())
anyio.run(main)
"""


async def test_many_mounted_tools_are_listed_by_server_and_count(tmp_path: Path) -> None:
    script = tmp_path / "synthetic.py"
    script.write_text(SYNTHETIC_SERVER)
    servers = {
        name: {"command": sys.executable, "args": [str(script), name, str(count)]}
        for name, count in (("big", 60), ("small", 3))
    }
    (tmp_path / "ws").mkdir()
    async with Host(
        workspace=tmp_path / "ws", state_dir=tmp_path / "state", mcp_servers=servers, connect_mcp_at_open=True
    ) as host:
        code = await _list(host, surface="code")
        description = code.tools[0].description or ""
        assert "Mounted MCP servers, 63 tools as tools.SERVER.TOOL(args): big (60), small (3)." in description
        assert "op_59" not in description and "- tools.read_file(" in description  # its own tools stay
        result = await host.run_code("print(await tools.big.op_59({}))")
        assert result.text.strip() == "big op_59"
        every = HostTools(host, surface="all")  # adapters list and call them by listed name
        assert "big__op_59" in [spec.name for spec in every.specs()]
        assert (await every.call("big__op_59", {})).text == "big op_59"
