"""Which codemode session an MCP request runs in, and closing it when its MCP session ends."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext

from codemode._ids import check_id
from codemode.errors import UserError
from codemode.host import Host
from codemode.mcp._tenants import ONE_TENANT
from codemode.state import EndReason

__all__ = ["ConnectionSessions", "NoSession", "SessionOf"]

SessionOf = Callable[[ServerRequestContext[Any]], str]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]

_STATE_KEY = "codemode_session"
_ENDED_KEPT = 10_000  # ended sessions whose tenant is remembered (to tell only it how they ended)


class NoSession(Exception):
    """A request that cannot be given a codemode session (the message says why and what to do)."""


class ConnectionSessions:
    """One codemode session per MCP session (streamable HTTP): ``mcp-<Mcp-Session-Id>``.

    Nothing is kept here but the sessions open now: the id comes from the request's connection,
    and the session's state (store, processes, archived text) lives in the state directory. The
    first request of an MCP session holds it (`Host.hold_session`: it ends with this process,
    also when this process dies) and puts a close on the SDK's per-connection exit stack, which
    unwinds when the MCP session ends (the client's DELETE, the idle timeout, the server
    stopping): it stops the session's ``lifecycle: session`` processes, drops its temp dir and
    records why it ended. The close runs through ``spawn`` (the front's task group), so the
    SDK's time bound on connection cleanup never cuts a stop short.

    Each MCP session belongs to the tenant whose token opened it (`claim`); a request of another
    tenant naming it is answered as if it did not exist (`belongs`), and is told nothing of how
    it ended.

    Args:
        host: The open host.
        spawn: Starts an async function in a task group that outlives the connections.
        idle_timeout_seconds: The front's idle timeout (named in the message of an expired session).
        tenants: Whether the front has several tenants (then an ended session's story is told
            only to its own tenant, while this process remembers whose it was).
    """

    def __init__(
        self, host: Host, spawn: Spawn, idle_timeout_seconds: float | None = None, *, tenants: bool = False
    ) -> None:
        self._host = host
        self._spawn = spawn
        self._idle = idle_timeout_seconds
        self._tenants = tenants
        self._open: dict[str, EndReason | None] = {}  # session -> why it is ending, once known
        self._owners: dict[str, str] = {}  # MCP session id -> its tenant, while it is open
        self._ended: collections.OrderedDict[str, str] = collections.OrderedDict()  # the same, ended
        self._stopping = False

    def claim(self, mcp_session_id: str, tenant: str) -> None:
        """The SDK opened this MCP session for a request of ``tenant``."""
        self._owners[mcp_session_id] = tenant

    def belongs(self, mcp_session_id: str, tenant: str) -> bool:
        """Whether a request of ``tenant`` may name this MCP session: it is that tenant's, or
        this process does not know it (the SDK then answers that it does not hold it)."""
        owner = self._owners.get(mcp_session_id) or self._ended.get(mcp_session_id)
        return owner is None or owner == tenant

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
            self._host.hold_session(session)
            self._open[session] = None
            connection.exit_stack.callback(self._spawn, functools.partial(self._close, session))
        return session

    def closing(self, mcp_session_id: str) -> None:
        """The client asked to end this MCP session (``DELETE``)."""
        session = f"mcp-{mcp_session_id}"
        if session in self._open:
            self._open[session] = "closed"

    def stopping(self) -> None:
        """The server is stopping: the sessions that end from now on end for that."""
        self._stopping = True

    async def _close(self, session: str) -> None:
        reason = self._open.pop(session, None) or ("server_stopped" if self._stopping else "expired")
        mcp_session_id = session.removeprefix("mcp-")
        owner = self._owners.pop(mcp_session_id, None)
        if owner is not None:
            self._ended[mcp_session_id] = owner
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)
        await self._host.close_session(session, reason)

    def ended_message(self, mcp_session_id: str, tenant: str = ONE_TENANT) -> str:
        """What a request of ``tenant`` presenting an MCP session id this process does not hold
        (or that is another tenant's) is told, answered with 404: per the MCP spec the client
        must then start a new session. How the session ended is told to its own tenant only."""
        again = "; start a new session (send initialize without an Mcp-Session-Id header)"
        owner = self._owners.get(mcp_session_id) or self._ended.get(mcp_session_id)
        if self._tenants and owner != tenant:
            return f"Session not found: this server holds no MCP session with this id for you{again}"
        try:
            end = self._host.session_end(check_id(f"mcp-{mcp_session_id}", "session_id"))
        except UserError:
            end = None
        if end is None:
            return (
                "Session not found: this server holds no MCP session with this id (it ended, or "
                f"never existed here){again}"
            )
        when = datetime.fromtimestamp(end.ended_at, UTC).isoformat(timespec="seconds")
        why = {
            "closed": "the client closed it (DELETE)",
            "expired": "it was idle longer than the server's idle timeout"
            + (f" ({self._idle:g} s)" if self._idle is not None else ""),
            "server_stopped": f"the server process that held it (pid {end.holder_pid}) stopped",
            "server_died": f"the server process that held it (pid {end.holder_pid}) died and the server "
            "was restarted; its lifecycle=session processes were stopped",
        }[end.reason]
        return f"Session ended at {when}: {why}{again}"


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
