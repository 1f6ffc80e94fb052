"""Which codemode session an MCP request runs in, and closing it when its MCP session ends."""

from __future__ import annotations

import collections
import functools
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext

from codemode._ids import check_id
from codemode.console import SessionInfo
from codemode.errors import UserError
from codemode.host import Host
from codemode.mcp._tenants import ONE_TENANT
from codemode.state import EndReason

__all__ = ["ConnectionSessions", "Fence", "NoSession", "SessionOf"]

SessionOf = Callable[[ServerRequestContext[Any]], str]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]

_STATE_KEY = "codemode_session"
_CLOSE_WAIT_SECONDS = 10.0  # how long a resume waits for the close of the session it resumes
_ENDED_KEPT = 10_000  # ended sessions whose tenant is remembered (to tell only it how they ended)


class NoSession(Exception):
    """A request that cannot be given a codemode session (the message says why and what to do)."""


class Fence:
    """Whether a front with a shared database may serve its sessions: not once it went four
    beats without recording one (`codemode.mcp._upkeep`: from six the other fronts may end its
    sessions). Open until `arm`ed: a front without a shared database never fences."""

    def __init__(self) -> None:
        self._after: float | None = None
        self._last = time.monotonic()
        self._told = False  # the stderr line for the fence closing was written

    def arm(self, beat_seconds: float) -> None:
        """Beats of ``beat_seconds`` start now."""
        self._after = 4 * beat_seconds
        self._last = time.monotonic()

    def recorded(self, at: float) -> None:
        """A beat that started at ``at`` (monotonic) was recorded."""
        if self._told:
            silent = time.monotonic() - self._last
            sys.stderr.write(
                f"codemode: reached the shared database again after {silent:.0f} s; serving again\n"
            )
            self._told = False
        self._last = max(self._last, at)

    def failed(self, exc: Exception) -> None:
        """A beat could not be recorded (the database is unreachable or failing)."""
        sys.stderr.write(f"codemode: could not record that this server is alive: {exc}\n")
        silent = self.closed_for()
        if silent is not None and not self._told:
            self._told = True
            sys.stderr.write(
                f"codemode: no beat recorded for {silent:.0f} s: this server stops serving its sessions "
                "until it reaches the shared database again (the other servers may end them)\n"
            )

    def closed_for(self) -> float | None:
        """Seconds since the last beat recorded, once past four beats; None while open."""
        if self._after is None:
            return None
        silent = time.monotonic() - self._last
        return silent if silent > self._after else None


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

    Each MCP session belongs to the tenant whose token opened it (`opened`); a request of another
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
        self._aliases: dict[str, str] = {}  # MCP session id -> the codemode session it resumed
        self._closed: dict[str, anyio.Event] = {}  # set when the close of a session is over
        self._resuming: set[str] = set()  # codemode sessions a resume is opening now
        self._info: dict[str, SessionInfo] = {}  # session -> what the console shows of it, while open
        self._held_since: dict[str, tuple[float, str]] = {}  # session -> (monotonic, MCP id), while open
        # MCP sessions whose codemode session another front ended or took while this one was cut
        # off from the shared database (closed here already): MCP session id -> that session.
        self._moved: collections.OrderedDict[str, str] = collections.OrderedDict()
        self.fence = Fence()
        self._stopping = False
        self.closed_count = 0  # sessions whose close ran here (the collector's policy reads it)

    def _session(self, mcp_session_id: str) -> str:
        return self._aliases.get(mcp_session_id) or f"mcp-{mcp_session_id}"

    async def resume_target(self, secret: str, tenant: str) -> str | Literal["unknown", "held"]:
        """The ended session a ``Codemode-Resume`` secret resumes for ``tenant``, or why not:
        ``"unknown"`` (no session of this tenant has it) or ``"held"`` (still open). A session
        this process is closing (its client's ``DELETE`` came, its close still runs) is waited
        for, up to `_CLOSE_WAIT_SECONDS`: a client may resume right after its DELETE."""
        for _ in range(2):
            found = await anyio.to_thread.run_sync(self._host.held.resume_target, secret, tenant)
            if found is None:
                return "unknown"
            session, held = found
            if not held:
                return session
            if self._open.get(session) is None and session not in self._closed:
                return "held"  # open here and not closing, or held by another process
            done = self._closed.setdefault(session, anyio.Event())
            with anyio.move_on_after(_CLOSE_WAIT_SECONDS):
                await done.wait()
        return "held"

    def reserve(self, session: str) -> bool:
        """Mark ``session`` as being resumed (on the loop); False when it is open here or another
        resume of it is under way."""
        if session in self._open or session in self._resuming:
            return False
        self._resuming.add(session)
        return True

    def release(self, session: str) -> None:
        """A resume of ``session`` is over (opened or not)."""
        self._resuming.discard(session)

    def opened(self, mcp_session_id: str, tenant: str, resumed: str | None) -> None:
        """The SDK opened this MCP session for ``tenant`` (on the loop): it is that tenant's,
        and, given ``resumed``, it continues that codemode session."""
        self._owners[mcp_session_id] = tenant
        if resumed is not None:
            self._aliases[mcp_session_id] = resumed

    def resume_secret(self, mcp_session_id: str, tenant: str) -> str | None:
        """A new resume secret for the codemode session of this MCP session (blocking)."""
        return self._host.held.resume_secret(self._session(mcp_session_id), tenant)

    def _owner(self, mcp_session_id: str) -> str | None:
        """The tenant of an MCP session open here, or that ended here not long ago."""
        return self._owners.get(mcp_session_id) or self._ended.get(mcp_session_id)

    def belongs(self, mcp_session_id: str, tenant: str) -> bool:
        """Whether a request of ``tenant`` may name this MCP session: it is that tenant's, or
        this process does not know it (the SDK then answers that it does not hold it)."""
        owner = self._owner(mcp_session_id)
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
        session = self._session(connection.session_id)
        if connection.state.get(_STATE_KEY) != session:
            connection.state[_STATE_KEY] = session
            params = connection.client_params
            client = None if params is None else f"{params.client_info.name} {params.client_info.version}"
            tenant = self._owner(connection.session_id) or ONE_TENANT
            self._host.held.hold(session, tenant=tenant, client=client)
            self._open[session] = None
            self._held_since[session] = (time.monotonic(), connection.session_id)
            self._info[session] = SessionInfo(session, tenant, client, time.time())
            close = functools.partial(self._close, session, connection.session_id)
            connection.exit_stack.callback(self._spawn, close)
        return session

    def taken_elsewhere(self, held: frozenset[str], since: float) -> None:
        """After a beat that started at ``since`` (monotonic) found this front holding ``held``
        in the shared database: every session open here before it and missing there was ended
        or taken by another front while this one was cut off. Each is closed here (through
        ``spawn``) and its MCP session answered 404 from now on (`moved`)."""
        for session, (opened, mcp_session_id) in list(self._held_since.items()):
            if opened >= since or session in held or session not in self._open:
                continue
            del self._held_since[session]
            self._open.pop(session, None)
            self._info.pop(session, None)
            self._moved[mcp_session_id] = session
            while len(self._moved) > _ENDED_KEPT:
                self._moved.popitem(last=False)
            sys.stderr.write(
                f"codemode: session {session} was ended or taken by another server while this one could not "
                "reach the shared database; closing it here\n"
            )
            self._spawn(functools.partial(self._close_moved, session))

    async def _close_moved(self, session: str) -> None:
        done = self._closed.setdefault(session, anyio.Event())  # a resume of it here waits for it
        try:
            await self._host.close_session(session, "server_died")  # its new holder's hold is left alone
        finally:
            self._closed.pop(session, None)
            done.set()

    def moved(self, mcp_session_id: str) -> bool:
        """Whether this MCP session's codemode session was found taken elsewhere (`taken_elsewhere`)."""
        return mcp_session_id in self._moved

    def open_sessions(self) -> list[SessionInfo]:
        """The sessions open here (the console's list)."""
        return list(self._info.values())

    def session_info(self, session_id: str) -> SessionInfo | None:
        """What the console shows of a session open here, or None."""
        return self._info.get(session_id)

    def closing(self, mcp_session_id: str) -> anyio.Event | None:
        """The client asked to end this MCP session (``DELETE``): the event set once its close
        is over (None: not open here). The front answers the ``DELETE`` after it, so that a
        resume right after it finds the session ended on any front sharing the database."""
        session = self._session(mcp_session_id)
        if session not in self._open:
            return None
        self._open[session] = "closed"
        return self._closed.setdefault(session, anyio.Event())

    def stopping(self) -> None:
        """The server is stopping: the sessions that end from now on end for that."""
        self._stopping = True

    @property
    def is_stopping(self) -> bool:
        """Whether the server is stopping (its health says so, so that new sessions go elsewhere)."""
        return self._stopping

    async def _close(self, session: str, mcp_session_id: str) -> None:
        if mcp_session_id in self._moved:  # closed when found taken elsewhere; only its MCP id is left
            self._aliases.pop(mcp_session_id, None)
            self._remember_ended(mcp_session_id)
            return
        self.closed_count += 1
        self._held_since.pop(session, None)
        reason = self._open.pop(session, None) or ("server_stopped" if self._stopping else "expired")
        self._info.pop(session, None)
        self._aliases.pop(mcp_session_id, None)
        self._closed.setdefault(session, anyio.Event())
        self._remember_ended(mcp_session_id)
        try:
            await self._host.close_session(session, reason)
        finally:
            self._closed.pop(session).set()

    def _remember_ended(self, mcp_session_id: str) -> None:
        owner = self._owners.pop(mcp_session_id, None)
        if owner is not None:
            self._ended[mcp_session_id] = owner
            while len(self._ended) > _ENDED_KEPT:
                self._ended.popitem(last=False)

    def ended_message(self, mcp_session_id: str, tenant: str = ONE_TENANT) -> str:
        """What a request of ``tenant`` presenting an MCP session id this process does not hold
        (or that is another tenant's) is told, answered with 404: per the MCP spec the client
        must then start a new session. How the session ended is told to its own tenant only."""
        again = "; start a new session (send initialize without an Mcp-Session-Id header)"
        owner = self._owner(mcp_session_id)
        if self._tenants and owner != tenant:
            return f"Session not found: this server holds no MCP session with this id for you{again}"
        if mcp_session_id in self._moved:
            return (
                "Session ended here: this server could not reach the shared state database for a while, and "
                "another server ended the session or took it over meanwhile (its lifecycle=session processes "
                "here were stopped); resume it with its Codemode-Resume secret on any server or start a new session (send initialize "
                "without an Mcp-Session-Id header)"
            )
        try:
            end = self._host.held.end_of(check_id(f"mcp-{mcp_session_id}", "session_id"))
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
