"""The streamable HTTP front: ``/mcp``, one codemode session per MCP session, bearer token.

Everything here is the MCP SDK's: its streamable HTTP session manager (sessions keyed by
``Mcp-Session-Id``, idle expiry, ``DELETE``), its DNS-rebinding check of the ``Host`` and
``Origin`` headers, its bearer authentication middleware (401 with ``WWW-Authenticate``); the
token is compared in constant time. The process keeps nothing but connections: each session's
store, processes and archived text live in the state directory, so several processes on one
state directory, behind a load balancer with affinity on ``Mcp-Session-Id``, serve one user
base (one machine: the state directory is SQLite and local process groups).
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import json
import math
import os
import resource
import signal
import socket
import stat
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.to_thread
import uvicorn
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemode._surface import SurfaceName
from codemode.console import Console, ConsoleMode, host_matcher
from codemode.errors import UserError
from codemode.host import Host
from codemode.mcp._approval import ClientApproved
from codemode.mcp._disconnect import SCOPE_KEY, Disconnect
from codemode.mcp._peer import router_only_protocol
from codemode.mcp._server import create_failed_server, create_server
from codemode.mcp._sessions import ConnectionSessions
from codemode.mcp._startup import HostSource, open_host
from codemode.mcp._tenants import ONE_TENANT, Tenants
from codemode.mcp._upkeep import beat, publish, short_collections
from codemode.network import protect_front, release_front
from codemode.state import session_holds

__all__ = [
    "DEFAULT_MAX_REQUESTS",
    "DEFAULT_PORT",
    "HttpOptions",
    "create_http_app",
    "parse_bind",
    "serve_http",
]

DEFAULT_PORT = 8765
ENDPOINT = "/mcp"
HEALTH_ENDPOINT = "/healthz"
_OPEN_FILES = 65_536
_HEALTH_SECONDS = 2.0
_CLOSE_ANSWER_SECONDS = 10.0  # longest a DELETE waits for its session's close before it is answered
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_REFUSAL_LOG_SECONDS = 10.0  # at most one line per this long about refused requests
DEFAULT_MAX_REQUESTS = 1024
#: Sent on initialize to resume an ended session's store and archive; its value is the secret
#: the server sent in `RESUME_SECRET_HEADER` when that session opened (or was last resumed).
RESUME_HEADER = b"codemode-resume"
RESUME_SECRET_HEADER = b"codemode-resume-secret"
_RETRY_AFTER_SECONDS = 1
_FENCED_RETRY_SECONDS = 5  # a fenced front's Retry-After (it may take a few beats to reach the database)
_ROUTED_KEEP_ALIVE_SECONDS = 180  # longer than the router keeps an idle client connection (120 s)


@dataclass(frozen=True)
class HttpOptions:
    """How the HTTP front listens and whom it lets in.

    Attributes:
        token: The bearer token every request must carry (``Authorization: Bearer ...``), or
            "" with ``tenants``.
        tenants: One token per tenant instead (`parse_tenants`): each MCP session belongs to
            the tenant that opened it, and no other tenant's request reaches it.
        host: The address to bind (default 127.0.0.1; the loopback interface only).
        port: The port (0: any free one, printed at start).
        allowed_origins: ``Origin`` values let in beside the loopback ones (``http://localhost:*``
            and the like); a ``:*`` suffix matches any port. A request without ``Origin`` (not
            from a browser) is let in.
        allowed_hosts: ``Host`` header values let in beside the loopback names and the bound
            address (the names a load balancer or clients use), ``:*`` for any port.
        idle_timeout_seconds: An MCP session with no request for this long ends (its
            ``lifecycle: session`` processes are stopped); None: sessions end only on ``DELETE``.
        max_requests: Requests (POSTs) in flight at once; one more is answered 503 at once with
            ``Retry-After``, rather than queueing behind them.
        surface: Which tools are listed: ``code``, ``default`` or ``all`` (`create_server`).
        output_schemas: List output schemas too.
        console: The console at ``/console`` (`codemode.console`): on, read-only or off.
        approvals: Who answers approvals: ``elicit`` (the client's user, through MCP
            elicitation) or ``console`` (a person at the console).
        front_address: Where clients reach this process when it is one of several behind
            ``--processes`` (the router's address, kept from commands' network proxy as the
            bound one is); None: the bound address.
        router_pid: The router such a process takes connections from, and from no other
            process (`codemode.mcp._peer`); None: anyone who can reach the socket.
        beat_seconds: With a shared database, how often this front records that it is alive;
            silent six beats, its sessions may be ended by the others, and past four it stops
            serving them (`codemode.mcp._upkeep`). Every front of one database uses the same.
    """

    token: str = ""
    tenants: Tenants | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    allowed_origins: Sequence[str] = field(default_factory=tuple)
    allowed_hosts: Sequence[str] = field(default_factory=tuple)
    idle_timeout_seconds: float | None = 30 * 60
    max_requests: int = DEFAULT_MAX_REQUESTS
    surface: SurfaceName = "default"
    output_schemas: bool = False
    console: ConsoleMode = ConsoleMode.ON
    approvals: Literal["elicit", "console"] = "elicit"
    front_address: tuple[str, int] | None = None
    router_pid: int | None = None
    beat_seconds: float = session_holds.BEAT_SECONDS

    def __post_init__(self) -> None:
        # Always required, on loopback too: a confined command reaches 127.0.0.1 when its
        # network is on, and an empty or short token is one it could guess.
        if self.tenants is not None and self.token:
            raise UserError("give the HTTP front one token or a tenants file, not both")
        if self.max_requests < 1:
            raise UserError(f"max_requests must be 1 or more, got {self.max_requests}")
        if not 0.1 <= self.beat_seconds <= 3600:
            raise UserError(f"beat_seconds must be 0.1 to 3600, got {self.beat_seconds:g}")
        if self.approvals == "console" and self.console is not ConsoleMode.ON:
            raise UserError("--approvals console needs a console that may answer them: --console on")
        self.access()

    def access(self) -> Tenants:
        """The tokens let in, each with its tenant.

        Raises:
            UserError: The one token is shorter than `MIN_TOKEN_CHARS`.
        """
        return self.tenants if self.tenants is not None else Tenants.one(self.token)

    def security(self) -> TransportSecuritySettings:
        """The SDK's DNS-rebinding settings for these options."""
        host = self.host if self.front_address is None else self.front_address[0]  # what clients reach
        bound = f"[{host}]" if ":" in host else host
        hosts = [f"{name}:*" for name in (*_LOOPBACK_NAMES, bound)]
        hosts += [*_LOOPBACK_NAMES, bound, *self.allowed_hosts]
        origins = [f"{scheme}://{name}:*" for scheme in ("http", "https") for name in _LOOPBACK_NAMES]
        origins += [f"{scheme}://{name}" for scheme in ("http", "https") for name in _LOOPBACK_NAMES]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(dict.fromkeys(hosts)),
            allowed_origins=[*origins, *self.allowed_origins],
        )


def parse_bind(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` as (host, port); the host defaults to 127.0.0.1.
    ``unix:PATH`` (a front process behind ``--processes``) is (``unix:PATH``, 0).

    Raises:
        UserError: Not one of those forms, or the port is not 0 to 65535.
    """
    if text.startswith("unix:/"):
        return text, 0
    host, _, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(
            f"--http {text!r}: give PORT, HOST:PORT or [IPv6]:PORT (e.g. 127.0.0.1:8765)"
        ) from None
    if not 0 <= port <= 65535:
        raise UserError(f"--http {text!r}: the port must be 0 to 65535")
    return host, port


class _TokenVerifier:
    """The bearer tokens, each compared in constant time; the access names its tenant (the
    SDK also refuses an MCP session to a client id other than the one that opened it)."""

    def __init__(self, tenants: Tenants) -> None:
        self._tenants = tenants

    async def verify_token(self, token: str) -> AccessToken | None:
        tenant = self._tenants.tenant_of(token)
        if tenant is not None:
            return AccessToken(token="(redacted)", client_id=tenant, scopes=[])
        return None


def _tenant(scope: Scope) -> str:
    """The tenant of an authenticated request (the bearer check ran before)."""
    user = scope.get("user")
    access = getattr(user, "access_token", None)
    return str(getattr(access, "client_id", ONE_TENANT))


class _LogRefusals:
    """Writes a line on stderr for a request refused for its token: who sent it and why.

    A command that hammers the port cannot flood the log: after a line, refusals are counted
    for `_REFUSAL_LOG_SECONDS` and the next line says how many there were.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._last = -math.inf
        self._unlogged = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if scope["type"] == "http" and not (user is not None and user.is_authenticated):
            self._note(scope)
        await self._app(scope, receive, send)

    def _note(self, scope: Scope) -> None:
        now = time.monotonic()
        if now - self._last < _REFUSAL_LOG_SECONDS:
            self._unlogged += 1
            return
        self._last = now
        has_header = any(name == b"authorization" for name, _ in scope.get("headers", ()))
        why = "a wrong bearer token" if has_header else "no bearer token"
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else "an unknown peer"
        more = f" ({self._unlogged} more refused since the last such line)" if self._unlogged else ""
        self._unlogged = 0
        sys.stderr.write(
            f"codemode: refused an HTTP request from {peer} to {scope.get('path')}: {why}{more}\n"
        )
        sys.stderr.flush()


class _Capacity:
    """At most ``limit`` requests (POSTs: calls and notifications) in flight; one more is
    answered at once with 503 and ``Retry-After`` (a JSON-RPC error saying so), never left to
    queue behind the others. Streams (GET) and closes (DELETE) are not counted."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app = app
        self._limit = limit
        self._in_flight = 0
        self._refused = 0
        self._last_note = -math.inf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        if self._in_flight >= self._limit:
            await self._refuse(send)
            return
        self._in_flight += 1
        try:
            await self._app(scope, receive, send)
        finally:
            self._in_flight -= 1

    async def _refuse(self, send: Send) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._last_note >= _REFUSAL_LOG_SECONDS:  # one line per while, with the count
            self._last_note = now
            sys.stderr.write(
                f"codemode: at capacity ({self._limit} requests in flight): refused {self._refused} with 503 "
                "so far; raise --max-requests if the machine has room\n"
            )
            sys.stderr.flush()
        message = (
            f"the server is at capacity ({self._limit} requests in flight); retry after "
            f"{_RETRY_AFTER_SECONDS} s"
        )
        await _json_error(send, 503, message, headers=[(b"retry-after", str(_RETRY_AFTER_SECONDS).encode())])


class _SessionEnds:
    """Between the bearer check and the SDK's session manager: a request's calls are cancelled
    when its client goes away before the answer (`Disconnect`); a ``DELETE`` is noted as the
    client closing its session; the SDK's bare 404 for an MCP session id it does not hold
    becomes a JSON-RPC error that says how that session ended and to start a new one (the MCP
    spec's rule: a client answered 404 for its session id must initialize again)."""

    def __init__(self, app: ASGIApp, sessions: ConnectionSessions | None) -> None:
        self._app = app
        self._sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        session_id = next(
            (value.decode("latin-1") for name, value in scope["headers"] if name == b"mcp-session-id"), None
        )
        tenant = _tenant(scope)
        sessions = self._sessions
        silent = None if sessions is None else sessions.fence.closed_for()
        if silent is not None:
            await _json_error(
                send,
                503,
                f"this server has not reached the shared state database for {silent:.0f} s, so it serves no "
                "session until it does (another server may take its sessions over); retry in a few seconds",
                headers=[(b"retry-after", str(_FENCED_RETRY_SECONDS).encode())],
            )
            return
        if session_id is not None and sessions is not None and not sessions.belongs(session_id, tenant):
            # Another tenant's session: answered as if it did not exist, before the SDK sees it.
            await self._session_not_found(session_id, send, tenant)
            return
        if session_id is not None and sessions is not None and sessions.moved(session_id):
            await self._session_not_found(session_id, send, tenant)  # taken elsewhere meanwhile
            return
        if session_id is not None and scope["method"] == "DELETE" and sessions is not None:
            closed = sessions.closing(session_id)
            if closed is not None:
                send = _after(closed, send)
        resume = next((v.decode("latin-1") for k, v in scope["headers"] if k == RESUME_HEADER), None)
        resumed: str | None = None
        if resume is not None:
            resumed = await self._resume_target(resume, session_id, scope["method"], tenant, send)
            if resumed is None:
                return  # refused, and answered
        try:
            await self._serve(scope, receive, send, session_id, tenant, resumed)
        finally:
            if resumed is not None and sessions is not None:
                sessions.release(resumed)

    async def _resume_target(
        self, secret: str, session_id: str | None, method: str, tenant: str, send: Send
    ) -> str | None:
        """The codemode session a ``Codemode-Resume`` secret resumes (reserved for this
        request), or None once the refusal is answered."""
        sessions = self._sessions
        if sessions is None or session_id is not None or method != "POST":
            await _json_error(
                send,
                400,
                f"send {RESUME_HEADER.decode()} only with initialize, without an Mcp-Session-Id header",
            )
            return None
        target = await sessions.resume_target(secret, tenant)
        if target == "unknown":
            await _json_error(
                send,
                404,
                "this resume secret resumes no ended session of yours (a wrong secret, one a later session "
                "replaced, one older than 30 days, or one of a session that never ran anything); start a new "
                f"session without the {RESUME_HEADER.decode()} header",
            )
            return None
        if target == "held" or not sessions.reserve(target):
            await _json_error(
                send,
                409,
                "the session of this resume secret is still open in another MCP session; end that one "
                "(DELETE) or let it expire, then resume",
            )
            return None
        return target

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session_id: str | None,
        tenant: str,
        resumed: str | None,
    ) -> None:
        sessions = self._sessions
        disconnect = Disconnect()
        answered = False
        replaced = False

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and not answered:
                disconnect.client_gone()
            return message

        async def watched_send(message: Message) -> None:
            nonlocal answered, replaced
            if replaced:
                return  # the SDK's own body of a 404 answered here
            if message["type"] == "http.response.start" and message["status"] == 404 and session_id:
                replaced = True
                await self._session_not_found(session_id, send, tenant)
                answered = True
                return
            if message["type"] == "http.response.start" and session_id is None and sessions is not None:
                opened = next((v for k, v in message.get("headers", ()) if k == b"mcp-session-id"), None)
                if opened is not None:  # the SDK opened an MCP session: this tenant's, with its secret
                    mcp_session_id = opened.decode("latin-1")
                    sessions.opened(mcp_session_id, tenant, resumed)
                    secret = await anyio.to_thread.run_sync(sessions.resume_secret, mcp_session_id, tenant)
                    if secret is not None:
                        headers = [*message.get("headers", ()), (RESUME_SECRET_HEADER, secret.encode())]
                        message = {**message, "headers": headers}
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True
            await send(message)

        await self._app({**scope, SCOPE_KEY: disconnect}, watched_receive, watched_send)

    async def _session_not_found(self, session_id: str, send: Send, tenant: str) -> None:
        sessions = self._sessions
        if sessions is not None:
            message = await anyio.to_thread.run_sync(sessions.ended_message, session_id, tenant)
        else:
            message = (
                "Session not found; start a new session (send initialize without an Mcp-Session-Id header)"
            )
        await _json_error(send, 404, message, code=-32600)


async def _json_error(
    send: Send, status: int, message: str, *, code: int = -32000, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with ``status`` and a JSON-RPC error (no request id: the request was not read)."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    await _json_reply(send, status, error, headers)


Health = Callable[[], Awaitable[str | None]]
"""Why the server cannot serve now (a short reason for a load balancer), or None."""


class _HealthEndpoint:
    """``GET /healthz``: 200 ``{"status": "ok"}``, or 503 with a short reason, for load balancers
    and orchestrators (no token: it says nothing but whether this process can serve)."""

    def __init__(self, health: Health) -> None:
        self._health = health

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await _json_reply(send, 405, {"status": "error", "reason": "use GET"})
            return
        try:
            with anyio.fail_after(_HEALTH_SECONDS):
                problem = await self._health()
        except TimeoutError:
            problem = f"the state database did not answer within {_HEALTH_SECONDS:g} s"
        if problem is None:
            await _json_reply(send, 200, {"status": "ok"})
        else:
            await _json_reply(send, 503, {"status": "unavailable", "reason": problem})


async def _json_reply(
    send: Send, status: int, data: Mapping[str, object], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with ``status`` and ``data`` as a JSON body."""
    body = json.dumps(data).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def _after(closed: anyio.Event, send: Send) -> Send:
    """``send``, holding a successful answer back until ``closed`` is set (at most
    `_CLOSE_ANSWER_SECONDS`)."""

    async def send_after(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] < 300:
            with anyio.move_on_after(_CLOSE_ANSWER_SECONDS):
                await closed.wait()
        await send(message)

    return send_after


def host_health(host: Host, sessions: ConnectionSessions) -> Health:
    """The health of a front over ``host``: not when it is stopping, nor when its state
    database does not answer a query (read in a worker thread)."""

    def probe() -> None:
        with host.state.db.connection() as conn:
            conn.execute("SELECT 1 FROM session_holds LIMIT 1").fetchall()
        if host.state.is_shared:  # the shared database too: sessions are held there
            with host.state.shared.connection() as shared:
                shared.execute("SELECT 1 FROM session_holds LIMIT 1").fetchall()

    async def health() -> str | None:
        if sessions.is_stopping:
            return "stopping"
        try:
            await anyio.to_thread.run_sync(probe)
        except Exception as exc:  # whatever the database says is a reason to route elsewhere
            return f"the state database cannot be read ({type(exc).__name__})"
        return None

    return health


def create_http_app(
    server: Server[Any],
    options: HttpOptions,
    sessions: ConnectionSessions | None = None,
    health: Health | None = None,
    console: Console | None = None,
) -> Starlette:
    """The ASGI app serving ``server`` at ``/mcp`` (its lifespan runs the session manager),
    ``health`` at ``/healthz`` and ``console`` at ``/console``; ``sessions`` tell an old session
    id how its session ended."""
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=options.security(),
        session_idle_timeout=options.idle_timeout_seconds,
    )
    ends = _SessionEnds(StreamableHTTPASGIApp(manager), sessions)
    endpoint = _LogRefusals(RequireAuthMiddleware(_Capacity(ends, options.max_requests), required_scopes=[]))
    health = health or _always_healthy
    return Starlette(
        routes=[
            Route(ENDPOINT, endpoint=endpoint),
            Route(HEALTH_ENDPOINT, endpoint=_HealthEndpoint(health)),
            *(console.routes() if console is not None else ()),
        ],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(_TokenVerifier(options.access())))
        ],
        lifespan=lambda app: manager.run(),
    )


async def _always_healthy() -> str | None:
    return None


async def _cannot_start() -> str | None:
    return "codemode could not start (the server's stderr and every tool call say why)"


async def serve_http(
    host: HostSource, options: HttpOptions, *, announce: Callable[[str], None] | None = None
) -> None:
    """Open ``host`` and serve it over streamable HTTP until SIGINT or SIGTERM; every MCP
    session still open then ends (its ``lifecycle: session`` processes are stopped).

    Args:
        host: A `Host`, or a function that makes one (its errors become error results).
        options: Where to listen and the token.
        announce: Called once with the URL when the socket listens (default: a line on stderr).

    Raises:
        UserError: The address cannot be bound.
    """
    sock = _listen(options.host, options.port)
    _raise_open_files_limit()
    bound = f"[{options.host}]" if ":" in options.host else options.host
    url = (
        options.host
        if options.host.startswith("unix:")
        else f"http://{bound}:{sock.getsockname()[1]}{ENDPOINT}"
    )
    sessions: ConnectionSessions | None = None
    console: Console | None = None
    async with open_host(host) as opened, anyio.create_task_group() as closing:
        if isinstance(opened, str):
            server = create_failed_server(opened)
        else:
            access = options.access()
            sessions = ConnectionSessions(
                opened, closing.start_soon, options.idle_timeout_seconds, tenants=access.several
            )
            if options.console is not ConsoleMode.OFF:
                console = Console(
                    opened,
                    options.console,
                    sessions,
                    access.tenant_of,
                    several=access.several,
                    host_allowed=host_matcher(options.security().allowed_hosts),
                    approvals=options.approvals == "console",
                )
                console.install()
                if console.approvals is not None:  # (before create_server, which elicits otherwise)
                    opened.approvals.callback = ClientApproved(console.approvals)
            server = create_server(
                opened,
                session_of=sessions,
                handshake_only=True,
                surface=options.surface,
                output_schemas=options.output_schemas,
            )
        if sessions is not None and not isinstance(opened, str):
            health = host_health(opened, sessions)
        else:
            health = _cannot_start
        app = create_http_app(server, options, sessions, health, console)
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
            # Behind --processes the router keeps a connection per client: idle as long as it.
            timeout_keep_alive=5 if options.front_address is None else _ROUTED_KEEP_ALIVE_SECONDS,
            http="auto" if options.router_pid is None else router_only_protocol(options.router_pid),
        )
        http = _Uvicorn(config)
        async with anyio.create_task_group() as signals:
            signals.start_soon(_stop_on_signal, http, sessions)
            if console is not None:
                signals.start_soon(console.run)
            (announce or _announce)(url)
            _warn_if_public(options.host)
            # What start-up made lives as long as the server: out of the collector's sight, so a
            # full collection under load scans only what requests made (bench/bench_console.py:
            # its longest pause went from ~65 ms to under the 50 ms target with 200 sessions).
            gc.collect()
            gc.freeze()
            signals.start_soon(short_collections, (lambda: sessions.closed_count) if sessions else lambda: 0)
            if sessions is not None and not isinstance(opened, str) and opened.state.is_shared:
                signals.start_soon(beat, opened, sessions, options.beat_seconds)
                signals.start_soon(publish, opened)
            # Commands with a network allowlist never reach this front through the proxy.
            front = options.front_address or (None if sock.family == socket.AF_UNIX else sock.getsockname())
            if front is not None:
                protect_front(str(front[0]), int(front[1]))
            try:
                await http.serve(sockets=[sock])
            finally:
                if front is not None:
                    release_front(str(front[0]), int(front[1]))
            if sessions is not None:
                sessions.stopping()
            if console is not None:
                console.uninstall()
            signals.cancel_scope.cancel()
    # Here the sessions' closes have run (the task group waited for them), then the host closed.


class _Uvicorn(uvicorn.Server):
    """uvicorn, minus its signal capture: it re-raises SIGTERM once it has stopped, which would
    kill the process before the sessions it ended are closed. `_stop_on_signal` stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(http: uvicorn.Server, sessions: ConnectionSessions | None) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for signum in received:
            if sessions is not None:
                sessions.stopping()  # the sessions that end from now on end for that
            # uvicorn's own handler (which sse-starlette hooks to end the open event streams
            # at once, not after the graceful-shutdown timeout)
            http.handle_exit(signum, None)
            return


def _announce(url: str) -> None:
    sys.stderr.write(f"codemode: serving MCP over streamable HTTP at {url}\n")
    sys.stderr.flush()


def _warn_if_public(host: str) -> None:
    """Say on stderr that a front bound beyond loopback serves anyone who has the token."""
    if not _loopback(host) and not host.startswith("unix:"):
        sys.stderr.write(
            f"codemode: listening on {host}, beyond this machine: whoever reaches it with the "
            "token runs commands as this user; put TLS in front (a reverse proxy), keep the token secret\n"
        )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _raise_open_files_limit() -> None:
    """Open files up to the hard limit (at most `_OPEN_FILES`): each connection holds one, each
    engine worker kept for a session two; the usual soft limit of 1,024 ends a front of 1,000
    sessions in EMFILE. (Engine workers set their own limit of 16.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, _OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _listen(host: str, port: int) -> socket.socket:
    if host.startswith("unix:"):
        return _listen_unix(host.removeprefix("unix:"))
    sock: socket.socket | None = None
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        # IPPROTO_TCP, not the default 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only
        # on accepted sockets whose protocol says TCP. With it on, an answer's second write
        # waits for the client's delayed ACK: 40 ms on every request that follows another at
        # once (bench/bench_front.py; tests/mcp/test_listen.py).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def _listen_unix(path: str) -> socket.socket:
    """A Unix socket at ``path`` only this user may connect to (a front process behind
    ``--processes``; its directory is the router's, mode 0700)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):  # never unlink what is not a socket
                raise UserError(f"cannot listen on {path}: something that is not a socket is there")
            os.unlink(path)
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    except UserError:
        sock.close()
        raise
    return sock
