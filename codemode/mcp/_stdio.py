"""The stdio front: one client, one codemode session, closed when the client disconnects."""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from codemode._surface import SurfaceName
from codemode.mcp._server import create_failed_server, create_server
from codemode.mcp._startup import HostSource, open_host

__all__ = ["serve_stdio"]


async def serve_stdio(
    host: HostSource, *, surface: SurfaceName = "default", output_schemas: bool = False
) -> None:
    """Open ``host`` (a `Host`, or a function that makes one) and serve it over stdio until the
    client disconnects; then close its session (stop its ``lifecycle: session`` processes).
    ``surface`` and ``output_schemas``: what it lists (`create_server`).

    A host that cannot start is served by a server that answers every call with the reason.
    """
    async with open_host(host) as opened:
        server = (
            create_failed_server(opened)
            if isinstance(opened, str)
            else create_server(opened, surface=surface, output_schemas=output_schemas)
        )
        async with stdio_server() as (read_stream, write_stream):
            try:
                await server.run(read_stream, write_stream, server.create_initialization_options())
            finally:
                if not isinstance(opened, str):
                    with anyio.CancelScope(shield=True):
                        await opened.close_session(opened.config.session_id)
