"""Which codemode session an MCP request runs in, and closing it when its MCP session ends."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext

from codemode.host import Host

__all__ = ["ConnectionSessions", "NoSession", "SessionOf"]

SessionOf = Callable[[ServerRequestContext[Any]], str]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]

_STATE_KEY = "codemode_session"


class NoSession(Exception):
    """A request that cannot be given a codemode session (the message says why and what to do)."""


class ConnectionSessions:
    """One codemode session per MCP session (streamable HTTP): ``mcp-<Mcp-Session-Id>``.

    Nothing is kept here: the id comes from the request's connection, and the session's state
    (store, processes, archived text) lives in the state directory. The first call of an MCP
    session puts a close on the SDK's per-connection exit stack, which unwinds when the MCP
    session ends (the client's DELETE, the idle timeout, the server stopping): it stops the
    session's ``lifecycle: session`` processes and drops its temp dir. The close runs through
    ``spawn`` (the front's task group), so the SDK's time bound on connection cleanup never
    cuts a stop short.

    Args:
        host: The open host.
        spawn: Starts an async function in a task group that outlives the connections.
    """

    def __init__(self, host: Host, spawn: Spawn) -> None:
        self._host = host
        self._spawn = spawn

    def __call__(self, ctx: ServerRequestContext[Any]) -> str:
        """The codemode session of the request's MCP session.

        Raises:
            NoSession: The request came without an MCP session (protocol 2026-07-28, which has
                none): it cannot share a store or processes with any other request.
        """
        connection = _connection(ctx)
        if connection.session_id is None:
            raise NoSession(
                "this codemode server keeps a session (store, background processes, archived text) per MCP "
                "session, and this request came without one (protocol version "
                f"{connection.protocol_version} has no sessions); connect with the initialize handshake "
                "(protocol 2025-11-25 or earlier; the MCP SDK does so with mode='legacy')"
            )
        session = f"mcp-{connection.session_id}"
        if connection.state.get(_STATE_KEY) != session:
            connection.state[_STATE_KEY] = session
            connection.exit_stack.callback(self._spawn, functools.partial(self._host.close_session, session))
        return session


def _connection(ctx: ServerRequestContext[Any]) -> Connection:
    """The request's connection. The SDK (2.3) hands low-level handlers a context whose session
    holds it privately (its public ``Context.connection`` is not passed to them yet), so it is
    read there and checked: an SDK that moves it fails here, loudly, not silently sessionless."""
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "this MCP SDK does not expose the request's connection; codemode needs mcp>=2.3,<3"
        )
    return connection
