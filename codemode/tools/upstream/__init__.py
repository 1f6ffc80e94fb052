"""The user's MCP servers mounted as tools: client sessions (stdio, streamable HTTP) through
the official ``mcp`` SDK, names made identifiers, declared and learned result types."""

from typing import TYPE_CHECKING, Any

from codemode.tools.upstream._config import (
    DEFAULT_CALL_TIMEOUT,
    McpServerConfig,
    McpServerReport,
    PublicConfig,
    load_mcp_config,
    parse_mcp_config,
)
from codemode.tools.upstream._names import identifier, unique_identifiers

if TYPE_CHECKING:
    from codemode.tools.upstream._connection import BACKOFF_SECONDS, Connection, Spawn
    from codemode.tools.upstream._convert import observed_schema
    from codemode.tools.upstream._servers import EXTENSION_PREFIX, UpstreamServers, sdk_version
    from codemode.tools.upstream._tools import UpstreamTool

# The names that need the MCP SDK load it at first use (PEP 562): importing codemode, the
# configuration and a Host that mounts no server never pay for it (~0.5 s of a cold start, bench/bench_cold.py).
_LAZY = {
    "BACKOFF_SECONDS": "_connection",
    "Connection": "_connection",
    "Spawn": "_connection",
    "observed_schema": "_convert",
    "EXTENSION_PREFIX": "_servers",
    "UpstreamServers": "_servers",
    "sdk_version": "_servers",
    "UpstreamTool": "_tools",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
