"""The MCP server front: ``run_code`` and the direct tools over stdio and streamable HTTP.

Over stdio a server process is one codemode session, closed when the client disconnects; over
streamable HTTP (``/mcp``, bearer token or one per tenant, ``Origin`` checked) each MCP session is its own
codemode session, closed when the MCP session ends. Its ``lifecycle: session`` background
processes are stopped then; ``lifecycle: managed`` ones live on.
"""

from codemode.mcp._http import DEFAULT_PORT, HttpOptions, create_http_app, parse_bind, serve_http
from codemode.mcp._router import serve_routed, stop_with_router
from codemode.mcp._server import (
    RUN_CODE_SCHEMA,
    RunCodeOutput,
    create_failed_server,
    create_server,
    flat_input_schema,
)
from codemode.mcp._sessions import ConnectionSessions
from codemode.mcp._stdio import serve_stdio
from codemode.mcp._tenants import Tenants, parse_tenants

__all__ = [
    "DEFAULT_PORT",
    "RUN_CODE_SCHEMA",
    "ConnectionSessions",
    "HttpOptions",
    "RunCodeOutput",
    "Tenants",
    "create_failed_server",
    "create_http_app",
    "create_server",
    "flat_input_schema",
    "parse_bind",
    "parse_tenants",
    "serve_http",
    "serve_routed",
    "serve_stdio",
    "stop_with_router",
]
