"""The user's MCP servers mounted as tools: client sessions (stdio, streamable HTTP) through
the official ``mcp`` SDK, names made identifiers, declared and learned result types."""

from typing import TYPE_CHECKING

from codemode._lazy import lazy_exports

if TYPE_CHECKING:
    from codemode.tools.upstream._config import (
        DEFAULT_CALL_TIMEOUT,
        McpServerConfig,
        McpServerReport,
        PublicConfig,
        load_mcp_config,
        parse_mcp_config,
    )
    from codemode.tools.upstream._connection import BACKOFF_SECONDS, Connection, Spawn
    from codemode.tools.upstream._convert import observed_schema
    from codemode.tools.upstream._names import identifier, unique_identifiers
    from codemode.tools.upstream._servers import EXTENSION_PREFIX, UpstreamServers, sdk_version
    from codemode.tools.upstream._tools import UpstreamTool

# Each name loads its module at first use (codemode._lazy). Those that need the MCP SDK load
# it then: importing codemode, the configuration and a Host that mounts no server never pay
# for it (~0.5 s of a cold start, bench/bench_cold.py).
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._config": (
                "DEFAULT_CALL_TIMEOUT",
                "McpServerConfig",
                "McpServerReport",
                "PublicConfig",
                "load_mcp_config",
                "parse_mcp_config",
            ),
            "._names": ("identifier", "unique_identifiers"),
            "._connection": ("BACKOFF_SECONDS", "Connection", "Spawn"),
            "._convert": ("observed_schema",),
            "._servers": ("EXTENSION_PREFIX", "UpstreamServers", "sdk_version"),
            "._tools": ("UpstreamTool",),
        },
    )


__all__ = [
    "BACKOFF_SECONDS",
    "DEFAULT_CALL_TIMEOUT",
    "EXTENSION_PREFIX",
    "Connection",
    "McpServerConfig",
    "McpServerReport",
    "PublicConfig",
    "Spawn",
    "UpstreamServers",
    "UpstreamTool",
    "identifier",
    "load_mcp_config",
    "observed_schema",
    "parse_mcp_config",
    "sdk_version",
    "unique_identifiers",
]
