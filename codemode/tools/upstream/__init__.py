"""The user's MCP servers mounted as tools: client sessions (stdio, streamable HTTP) through
the official ``mcp`` SDK, names made identifiers, declared and learned result types."""

from codemode.tools.upstream._config import (
    DEFAULT_CALL_TIMEOUT,
    McpServerConfig,
    load_mcp_config,
    parse_mcp_config,
)
from codemode.tools.upstream._connection import BACKOFF_SECONDS, Connection, Spawn
from codemode.tools.upstream._convert import observed_schema
from codemode.tools.upstream._names import identifier, unique_identifiers
from codemode.tools.upstream._servers import EXTENSION_PREFIX, UpstreamServers, sdk_version
from codemode.tools.upstream._tools import UpstreamTool

__all__ = [
    "BACKOFF_SECONDS",
    "DEFAULT_CALL_TIMEOUT",
    "EXTENSION_PREFIX",
    "Connection",
    "McpServerConfig",
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
