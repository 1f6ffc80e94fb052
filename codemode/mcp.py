"""MCP server front: ``run_code`` plus every registered tool, over the official MCP SDK.

The low-level ``Server`` is used (not ``MCPServer``) because the tools already carry their
own JSON Schemas and MCP-shaped results; the SDK only needs to list and route them.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from codemode._ids import ID_MAX_CHARS, check_id
from codemode.errors import UserError
from codemode.host import Host

RUN_CODE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The JavaScript program. Optional first line: "
            '// @run_code: {"max_output_tokens": N, "timeout_seconds": N}',
        },
        "call_id": {
            "type": "string",
            "description": f"Optional id (1 to {ID_MAX_CHARS} characters, no control characters); "
            "calling again with a recorded id returns the recorded result.",
            "minLength": 1,
            "maxLength": ID_MAX_CHARS,
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


def create_server(host: Host, *, name: str = "codemode") -> Server[Any]:
    """An MCP server exposing ``run_code`` and the host's tools (the host must be open)."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tools = [
            types.Tool(name="run_code", description=host.run_code_description(), input_schema=RUN_CODE_SCHEMA)
        ]
        for t in host.registry:
            tools.append(
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.input_schema,
                    output_schema=t.output_schema,
                )
            )
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return await dispatch(params)
        except Exception as exc:  # a host fault: an error result, never a protocol error
            return _error(f"{params.name} failed on the host: {type(exc).__name__}: {exc}")

    async def dispatch(params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        if params.name == "run_code":
            code = args.get("code")
            if not isinstance(code, str):
                return _error('run_code needs {"code": "<JavaScript program>"}')
            call_id = args.get("call_id")
            if call_id is not None:
                try:
                    check_id(call_id, "call_id")
                except UserError as exc:
                    return _error(f"run_code: {exc}; nothing ran")
            result = await host.run_code(code, call_id=call_id)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=result.text)],
                structured_content={
                    "ok": result.ok,
                    "call_id": result.call_id,
                    "truncated": result.truncated,
                    "refs": result.refs,
                    "error": None if result.error is None else result.error.model_dump(),
                    "usage": result.usage.model_dump(),
                },
                is_error=not result.ok,
            )
        called = await host.call_tool(params.name, args)
        structured = called.structured_content
        if structured is not None and not isinstance(structured, dict):
            structured = {"result": structured}
        # Clients may hand structured content to the model too: send it only when it fits the
        # same budget as the text (its JSON bytes bound its tokens), else the text says it all.
        if structured is not None and len(json.dumps(structured).encode()) > host.config.max_output_tokens:
            structured = None
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=called.text)],
            structured_content=structured,
            is_error=called.is_error,
        )

    return Server(
        name,
        instructions="Use run_code to call several tools in one JavaScript program; print only what you need.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


async def serve_stdio(host: Host) -> None:
    """Open ``host`` and serve it over stdio until the client disconnects."""
    async with host:
        server = create_server(host)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
