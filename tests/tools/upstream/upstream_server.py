"""A real MCP server for the upstream tests and the bench, written with the SDK's MCPServer.

    python upstream_server.py stdio [NAME]
    python upstream_server.py http PORT TOKEN     (requests need "Authorization: Bearer TOKEN")

Its tools cover what codemode has to handle: a typed result (outputSchema) and an untyped one
(JSON text), plain text, an error, an image, a crash mid-call, a tool list that changes, a slow
tool that records its cancellation (in the file named by $UPSTREAM_MARKS), concurrency.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TypedDict

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class Sum(TypedDict):
    total: int
    inputs: list[int]


server = MCPServer(
    sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "stdio" else "upstream-test", version="1.2.3"
)


def _mark(line: str) -> None:
    marks = os.environ.get("UPSTREAM_MARKS")
    if marks:
        with open(marks, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@server.tool(description="Add numbers; the result is typed.")
def typed_sum(numbers: list[int]) -> Sum:
    return {"total": sum(numbers), "inputs": numbers}


@server.tool(
    name="user-info", description="A user's record, as JSON text (no output schema).", structured_output=False
)
def user_info(login: str) -> str:
    return json.dumps({"login": login, "id": len(login), "tags": ["a", "b"], "admin": False})


@server.tool(
    name="user_info", description="A second tool whose name collides with user-info.", structured_output=False
)
def user_info_2(login: str) -> str:
    return f"plain text for {login}"


@server.tool(description="Echo text back (plain text).", structured_output=False)
def echo(text: str) -> str:
    return text


@server.tool(description="Always fails with a message.")
def fail(reason: str) -> str:
    raise ToolError(f"cannot do it: {reason}")


@server.tool(description="A tiny PNG image.")
def picture() -> Image:
    return Image(
        data=bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"), format="png"
    )


@server.tool(description="Print the secret from the environment.", structured_output=False)
def leak() -> str:
    return "the token is " + os.environ.get("UPSTREAM_SECRET", "")


@server.tool(description="Exit the server process in the middle of the call.", structured_output=False)
async def crash() -> str:
    print("about to crash: goodbye", file=sys.stderr, flush=True)
    _mark(f"crash {os.getpid()}")
    os._exit(3)


@server.tool(description="Report this server process's id.", structured_output=False)
def pid() -> str:
    return str(os.getpid())


@server.tool(description="Sleep, then answer; records a cancellation.", structured_output=False)
async def slow(seconds: float, tag: str) -> str:
    _mark(f"start {tag}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _mark(f"cancelled {tag}")
        raise
    _mark(f"done {tag}")
    return f"slept {seconds} ({tag})"


@server.tool(
    description="Add a tool named extra and tell the client the list changed.", structured_output=False
)
async def grow(ctx: Context) -> str:
    def extra(x: int) -> str:
        return f"extra {x}"

    server.add_tool(extra, name="extra", description="A tool added at run time.", structured_output=False)
    await ctx.session.send_tool_list_changed()
    return "grown"


def _http(port: int, token: str) -> None:
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    app = server.streamable_http_app()

    async def check(request: Request, call_next: object) -> Response:
        if request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)  # type: ignore[operator, no-any-return]

    app.add_middleware(BaseHTTPMiddleware, dispatch=check)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1] == "http":
        _http(int(sys.argv[2]), sys.argv[3])
    else:
        Path(os.environ.get("UPSTREAM_MARKS", os.devnull))
        server.run("stdio")
