"""An MCP server (the SDK's) whose one tool names the variables of its own environment.

python _env_server.py
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("env-names", version="1.0.0")


@server.tool(
    description="The names of this server's environment variables, space-separated.", structured_output=False
)
def names() -> str:
    return " ".join(sorted(os.environ))


if __name__ == "__main__":
    server.run("stdio")
