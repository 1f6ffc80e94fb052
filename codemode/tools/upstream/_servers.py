"""The user's MCP servers, mounted as tools: one `Connection` and one `Extension` per server.

A server's tools are named ``<server>.<tool>`` (identifiers made from the original names,
`unique_identifiers`) and called as ``tools.<server>.<tool>(args)``. A server whose tools are
not known yet is connected on first use (`ensure_connected`, which the Host calls before a
program, a direct call, a search or a description).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

from codemode.errors import UserError
from codemode.sandbox import SandboxPolicy
from codemode.state import State
from codemode.tools._model import Extension, ToolContext, ToolResult
from codemode.tools.upstream._config import McpServerConfig, McpServerReport, Reachability
from codemode.tools.upstream._connection import Connection, Spawn
from codemode.tools.upstream._convert import observed_schema, to_result
from codemode.tools.upstream._names import identifier, unique_identifiers
from codemode.tools.upstream._tools import UpstreamArguments, UpstreamTool, make_upstream_tool

__all__ = ["EXTENSION_PREFIX", "UpstreamServers"]

EXTENSION_PREFIX = "mcp:"  # a server's extension is named mcp:<server identifier>
_LISTED_NAMES = 12  # the guidance names this many of a server's tools; searchTools finds the rest


class UpstreamServers:
    """The upstream servers of one Host.

    Args:
        state: The open state directory (learned result types, the servers' logs).
        spawn: Starts the connections' owner tasks.
        workspace: A stdio server's default working directory.
        policy: The host's sandbox policy (for servers with ``sandbox``).
        install: Puts a server's extension into the registry (replacing its previous one).
        taken: The names of the tools not from upstream servers (a server may not shadow one).
    """

    def __init__(
        self,
        *,
        state: State,
        spawn: Spawn,
        workspace: Path,
        policy: Callable[[], SandboxPolicy],
        install: Callable[[str, Extension], None],
        taken: Callable[[], Collection[str]],
    ) -> None:
        self._state = state
        self._spawn = spawn
        self._workspace = workspace
        self._policy = policy
        self._install = install
        self._taken = taken
        self._connections: dict[str, Connection] = {}  # by identifier
        self._tools: dict[str, dict[str, UpstreamTool]] = {}

    @property
    def names(self) -> dict[str, str]:
        """Each server's identifier (``tools.<identifier>``) -> its configured name."""
        return {ident: c.config.name for ident, c in self._connections.items()}

    def add(self, config: McpServerConfig) -> str:
        """Mount one server (not connected yet); returns its identifier.

        Raises:
            UserError: A server with this name is mounted already.
        """
        if any(c.config.name == config.name for c in self._connections.values()):
            raise UserError(f"an MCP server named {config.name!r} is already added")
        taken = set(self._taken()) | set(self._connections)
        ident = unique_identifiers([config.name], taken=taken, suffix="_mcp", empty="server")[config.name]
        log = self._log_path(config.name)
        self._connections[ident] = Connection(
            config,
            spawn=self._spawn,
            log_path=log,
            workspace=self._workspace,
            policy=self._policy,
            redactor=self._state.redactor,
            on_tools=functools.partial(self._mount, ident),
        )
        self._install(ident, self._extension(ident, []))
        return ident

    def connection(self, name: str) -> Connection:
        """The connection of a server, by its configured name or identifier.

        Raises:
            UserError: No such server.
        """
        for ident, conn in self._connections.items():
            if name in (ident, conn.config.name):
                return conn
        raise UserError(f"no MCP server named {name!r} (have: {', '.join(self.names.values()) or 'none'})")

    async def ensure_connected(self) -> None:
        """Connect, at once, every server not connected whose next try is due (never tried,
        or its backoff after a failure is over: a broken server costs one try per backoff
        step, at most one per 30 s). A failure is remembered, shown in the server's guidance
        and raised by its calls, not here."""
        todo = [ident for ident, conn in self._connections.items() if conn.retry_due()]
        if not todo:
            return

        async def one(conn: Connection) -> None:
            try:
                await conn.session()
            except Exception:
                pass

        async with anyio.create_task_group() as tg:
            for ident in todo:
                tg.start_soon(one, self._connections[ident])
        for ident in todo:
            conn = self._connections[ident]
            if not conn.connected:
                self._install(ident, self._extension(ident, []))

    async def aclose(self) -> None:
        """Close every session (stdio servers are stopped)."""
        async with anyio.create_task_group() as tg:
            for conn in self._connections.values():
                tg.start_soon(conn.aclose)

    # -- tools --------------------------------------------------------------------------

    def _mount(self, ident: str, conn: Connection) -> None:
        """(Re)build a server's tools from its current list and install its extension."""
        server = conn.config.name
        learned = self._state.learned.for_server(server)
        # "then" is no property of tools.<server> (so that awaiting it by mistake is harmless).
        names = unique_identifiers([t.name for t in conn.tools], taken=("then",))
        tools: dict[str, UpstreamTool] = {}
        for spec in conn.tools:
            name = f"{ident}.{names[spec.name]}"
            tools[spec.name] = make_upstream_tool(
                name, server, spec, self._caller(ident, conn, spec.name), learned.get(spec.name)
            )
        self._tools[ident] = tools
        self._install(ident, self._extension(ident, list(tools.values())))

    def _caller(
        self, ident: str, conn: Connection, tool: str
    ) -> Callable[[UpstreamArguments, ToolContext], Any]:
        label = f"{conn.config.name}.{tool}"

        async def call(args: UpstreamArguments, ctx: ToolContext) -> ToolResult:
            answer = await conn.call(tool, args.values)
            result, structured = to_result(
                answer, label=label, archive=ctx.archive, session=ctx.session_id, redact=conn.redact
            )
            mounted = self._tools.get(ident, {}).get(tool)
            if structured and mounted is not None and mounted.output_schema is None:
                schema = observed_schema(result.structured_content)
                self._state.learned.put(conn.config.name, tool, schema)
                mounted.output_schema = schema
                mounted.output_observed = True
            return result

        return call

    def _extension(self, ident: str, tools: list[UpstreamTool]) -> Extension:
        conn = self._connections[ident]
        name = conn.config.name
        shown = name if name == ident else f"{name} (as tools.{ident})"
        if conn.connected and conn.server_info is not None:
            info = conn.server_info
            names = ", ".join(t.name.split(".", 1)[1] for t in tools[:_LISTED_NAMES])
            more = (
                f', and {len(tools) - _LISTED_NAMES} more: searchTools("{ident} <what you need>")'
                if len(tools) > _LISTED_NAMES
                else ""
            )
            guidance = (
                f"MCP server {shown}: {len(tools)} tools ({info.name} {info.version}), called as "
                f'tools.{ident}.<tool>(args): {names}{more}. describeTool("{ident}.<tool>") gives '
                "the types (a result type marked observed was learned from a call)."
            )
        elif conn.last_error is not None:
            tail = conn.stderr_tail()
            ends = f"; its log ends: {tail}" if tail else ""
            guidance = f"MCP server {shown}: not available ({conn.last_error}{ends}); its tools are missing."
        else:
            guidance = f"MCP server {shown}: not connected yet; its tools appear once it is."
        return Extension(EXTENSION_PREFIX + ident, tools, guidance=guidance, namespace=ident)

    # -- diagnostics --------------------------------------------------------------------

    async def report(self) -> list[McpServerReport]:
        """For ``codemode doctor``: each server, reachable or why not, tool count, version."""
        await self.ensure_connected()
        rows: list[McpServerReport] = []
        for ident, conn in self._connections.items():
            # A url or an argument may hold a ${VAR} expanded from a secret: every text redacted.
            redact = conn.redact
            info = conn.server_info
            state: Reachability
            if conn.connected and info is not None:
                state = {
                    "reachable": True,
                    "tools": len(conn.tools),
                    "server": {"name": info.name, "version": info.version},
                }
            else:
                state = {"reachable": False, "reason": redact(conn.last_error or "not connected"), "tools": 0}
                tail = conn.stderr_tail()
                if tail:
                    state["log_tail"] = redact(tail)
            shown = conn.config.public(redact)
            rows.append({**shown, "identifier": redact(ident), "log": redact(str(conn.log_path)), **state})
        return rows

    def read_log(self, name: str) -> str:
        """A server's log, redacted (its stderr, and a line per start, end and failure); a
        server not configured here is found by name in the state dir.

        Raises:
            UserError: No log of that server.
        """
        known = [c for ident, c in self._connections.items() if name in (ident, c.config.name)]
        path = known[0].log_path if known else self._log_path(name)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            if known:
                return ""
            raise UserError(
                f"no log of an MCP server named {name!r} in {path.parent} (pass its --mcp-config; have: "
                f"{', '.join(self.names.values()) or 'none'})"
            ) from None
        return known[0].redact(text) if known else self._state.redactor.redact(text)

    def _log_path(self, name: str) -> Path:
        return self._state.state_dir / "mcp-logs" / f"{identifier(name, 'server')}.log"


def sdk_version() -> str:
    """The installed MCP SDK's version."""
    return version("mcp")
