"""The user's MCP servers of one Host: their configurations, and the upstream servers made at
first need (the MCP SDK client loads only then: about 0.5 s of the cold start of a run that
mounts no server, bench/bench_cold.py), with the loop tasks their sessions run on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codemode.engine import LoopSpawner
from codemode.errors import UserError
from codemode.sandbox import SandboxPolicy
from codemode.state import State
from codemode.tools import Extension, ToolRegistry
from codemode.tools.upstream import McpServerConfig, McpServerReport, load_mcp_config, parse_mcp_config

if TYPE_CHECKING:
    from codemode.tools.upstream import UpstreamServers

__all__ = ["McpServers", "Mounts"]

McpServers = str | Path | Mapping[str, object] | list[McpServerConfig] | tuple[McpServerConfig, ...]
"""What ``Host(mcp_servers=...)`` takes: an ``mcpServers`` JSON file, its parsed object, or
`McpServerConfig`s."""


def server_configs(servers: McpServers | None) -> list[McpServerConfig]:
    """The servers ``Host(mcp_servers=...)`` names.

    Raises:
        UserError: The file or object is not a valid ``mcpServers`` configuration.
    """
    if servers is None:
        return []
    if isinstance(servers, str | Path):
        return load_mcp_config(servers)
    if isinstance(servers, Mapping):
        return parse_mcp_config(servers)
    return list(servers)


class Mounts:
    """The MCP servers mounted as ``tools.<server>.<tool>`` in one host's registry.

    Args:
        servers: The servers ``Host(mcp_servers=...)`` names.
        registry: The registry their extensions go in.
        workspace: The host's workspace.
        policy: The sandbox policy in force (a server's command is confined by it).
    """

    def __init__(
        self,
        servers: McpServers | None,
        *,
        registry: ToolRegistry,
        workspace: Path,
        policy: Callable[[], SandboxPolicy],
    ) -> None:
        self.configs: list[McpServerConfig] = server_configs(servers)
        self._registry = registry
        self._workspace = workspace
        self._policy = policy
        self._spawner: LoopSpawner | None = None
        self._upstream: UpstreamServers | None = None

    def servers(self, state: State | None) -> UpstreamServers:
        """The upstream servers, made at first need.

        Raises:
            UserError: The host is not open (``state`` is None).
        """
        if self._upstream is None:
            if state is None:
                raise UserError(
                    "the Host is not open: use `async with Host(...) as host:` or await host.open()"
                )
            from codemode.tools.upstream import UpstreamServers

            self._upstream = UpstreamServers(
                state=state,
                spawn=self._spawn,
                workspace=self._workspace,
                policy=self._policy,
                install=self._install,
                taken=lambda: [n for n in self._registry.names() if "." not in n],
            )
        return self._upstream

    async def open(self, state: State, connect: bool) -> None:
        """Mount the configured servers (if any) once the state dir is open; ``connect`` them now."""
        if self.configs:
            servers = self.servers(state)
            for server in self.configs:
                servers.add(server)
            if connect:
                await servers.ensure_connected()

    def add(self, name: str, server: Mapping[str, object], state: State | None) -> str:
        """Mount one more server; its identifier (its name until the host opens).

        Raises:
            UserError: The fields are invalid, or the name is taken.
        """
        (config,) = parse_mcp_config({name: server}, source="add_mcp_server")
        self.configs.append(config)
        if state is None:
            return name  # added at open
        return self.servers(state).add(config)

    async def connect(self) -> None:
        """Connect the servers not tried yet (none made: nothing to do)."""
        if self._upstream is not None:
            await self._upstream.ensure_connected()

    async def report(self) -> list[McpServerReport]:
        """Each server's report (connecting it first)."""
        return [] if self._upstream is None else await self._upstream.report()

    async def aclose(self) -> None:
        """Close the servers' sessions and the tasks they ran on."""
        if self._upstream is not None:
            await self._upstream.aclose()
            self._upstream = None
        if self._spawner is not None:
            await self._spawner.aclose(5.0)
            self._spawner = None

    def _spawn(self, factory: Callable[[], Any]) -> None:
        """Start a task that outlives its caller (an MCP server's session), on this loop."""
        if self._spawner is None:
            self._spawner = LoopSpawner()  # made at the first use: a Host without servers needs none
        self._spawner.spawn(factory, lambda: None)

    def _install(self, ident: str, extension: Extension) -> None:
        """Put an upstream server's extension (its tools, its guidance) in the registry."""
        from codemode.tools.upstream import EXTENSION_PREFIX

        self._registry.remove_extension(EXTENSION_PREFIX + ident)
        self._registry.add_extension(extension)
