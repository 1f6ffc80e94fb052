"""Several front processes on one port: ``codemode mcp --http ADDR --processes N``.

One process serves MCP on one core. With ``--processes N`` this process serves none: it listens
on the port, starts N front processes (each a ``codemode mcp --http unix:PATH`` on the same state
directory, as replicas are on one database) and routes each request to one of them, with the
affinity a load balancer keeps in front of replicas: a request naming an ``Mcp-Session-Id`` goes
to the process that opened that session (learned from the answer to ``initialize``); a new
session goes to the process holding the fewest. Everything else about a session (its store, its
processes, how it ended) is in the state directory, which every process shares, so a session
whose process died is resumed on another with its secret, as between machines. Paths other
than ``/mcp`` (the console) go to the first process; ``/healthz`` asks every one.

HTTP/1.1 is parsed and written again with h11 on both sides (one connection to a process per
client connection and process), so every body, chunked stream and event stream is framed as
the process framed it; a client that disconnects closes its connection to the process, which
then cancels the session's running calls as for a direct client.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread
import h11

from codemode.errors import UserError
from codemode.mcp._http import ENDPOINT, HttpOptions, _listen, _raise_open_files_limit, _warn_if_public
from codemode.mcp._tenants import Tenants

log = logging.getLogger("codemode.mcp")

__all__ = ["ROUTER_PID_VARIABLE", "FrontProcess", "Router", "serve_routed", "stop_with_router"]

ROUTER_PID_VARIABLE = "CODEMODE_ROUTER_PID"
"""Names the router's pid to a front process it starts (`stop_with_router`)."""
_PR_SET_PDEATHSIG = 1

_READ_BYTES = 65_536
_MAX_BODY_BYTES = 64 * 1024 * 1024  # a request body the router holds before passing it on
_START_SECONDS = 120.0  # a front process has this long to listen before it is started again
_HEAD_SECONDS = 30.0  # a request's head (and body) must arrive within this once begun
_IDLE_SECONDS = 120.0  # a client connection idle this long between requests is closed
_MAX_CONNECTIONS = 4096  # client connections at once; one more is answered 503 and closed
_MAX_PENDING_BYTES = 64 * 1024  # what a client may send ahead while its answer streams
_STOP_SECONDS = 15.0
_SESSION_HEADER = b"mcp-session-id"
_MAX_HEAD_BYTES = 16 * 1024  # a request's line and headers (uvicorn's own bound)
_HOP_HEADERS = frozenset(
    [
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"upgrade",
        b"te",
        b"trailer",
        b"proxy-connection",
        b"expect",
    ]
)


@dataclass
class FrontProcess:
    """One front process: the command that starts it and the socket it listens on."""

    index: int
    argv: list[str]
    socket_path: str
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    sessions: set[str] = field(default_factory=set)
    ready: anyio.Event = field(default_factory=anyio.Event)
    restarts: int = 0
    stopped: bool = False
    failed: str | None = None  # why it could not start the first time (the router then stops)


class _Closed(Exception):
    """The other side closed its connection."""


class _FrontGone(Exception):
    """The front process closed (or never took) the connection before it answered."""


class _Side:
    """One HTTP/1.1 connection and its h11 state (the client's to us, or ours to a process)."""

    def __init__(self, stream: anyio.abc.ByteStream, role: type[h11.CLIENT] | type[h11.SERVER]) -> None:
        self.stream = stream
        self.conn = h11.Connection(role, max_incomplete_event_size=_MAX_HEAD_BYTES)

    async def next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.stream.receive(_READ_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                data = b""
            self.conn.receive_data(data)

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send(data)


class Router:
    """Routes requests on one listening socket to the front processes (see the module)."""

    def __init__(
        self, fronts: Sequence[FrontProcess], access: Tenants, session_idle_seconds: float | None
    ) -> None:
        self._fronts = list(fronts)
        self._access = access
        # session id: the process that opened it, and when a request last named it
        self._owner: dict[str, tuple[FrontProcess, float]] = {}
        self._forget_after = None if session_idle_seconds is None else 2 * session_idle_seconds
        self._stopping = False
        self._connections = anyio.CapacityLimiter(_MAX_CONNECTIONS)

    # -- the front processes ----------------------------------------------------------------

    async def run_fronts(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start every front process and keep it running (started again when it exits).

        Raises:
            UserError: A front process could not start the first time (its errors are above).
        """
        for front in self._fronts:
            task_group.start_soon(self._keep_running, front)
        for front in self._fronts:
            await front.ready.wait()
            if front.failed is not None:
                raise UserError(front.failed)

    async def _keep_running(self, front: FrontProcess) -> None:
        delay = 1.0
        while True:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(front.socket_path)
            front.process = subprocess.Popen(front.argv, env=front.env, start_new_session=True)
            started = time.monotonic()
            if await self._listening(front):
                front.ready.set()
            elif front.restarts == 0:  # never listened: its arguments or its machine are wrong
                front.failed = (
                    f"front process {front.index} did not start (exit status {front.process.poll()})"
                )
                front.ready.set()
                return
            code = await anyio.to_thread.run_sync(front.process.wait, abandon_on_cancel=True)
            if self._stopping:
                return
            for session in front.sessions:
                self._owner.pop(session, None)
            front.sessions.clear()
            front.ready = anyio.Event()
            front.restarts += 1
            sys.stderr.write(f"codemode: front process {front.index} exited ({code}); starting it again\n")
            delay = 1.0 if time.monotonic() - started > 60 else min(delay * 2, 30.0)
            await anyio.sleep(delay)

    async def _listening(self, front: FrontProcess) -> bool:
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline and front.process is not None and front.process.poll() is None:
            try:
                stream = await anyio.connect_unix(front.socket_path)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return True
        if front.process is not None and front.process.poll() is None:
            front.process.kill()
        return False

    def stop_fronts(self) -> None:
        """Ask every front process to stop (SIGTERM: its sessions end as in one process), once:
        a second signal would make it skip closing its sessions."""
        self._stopping = True
        for front in self._fronts:
            if front.process is not None and front.process.poll() is None and not front.stopped:
                front.stopped = True
                front.process.send_signal(signal.SIGTERM)

    def wait_fronts(self) -> None:
        """Wait for the front processes to end (killed after `_STOP_SECONDS`)."""
        deadline = time.monotonic() + _STOP_SECONDS
        for front in self._fronts:
            if front.process is None:
                continue
            try:
                front.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                front.process.kill()
                front.process.wait()

    # -- requests ---------------------------------------------------------------------------

    async def serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        """Serve client connections until cancelled (an accept that fails, out of files, is
        tried again; the router goes on)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._sweep)
            while True:
                try:
                    await listener.serve(self._admit)
                except OSError as exc:
                    log.warning("accepting a connection failed: %s", exc)
                    await anyio.sleep(0.1)

    async def _admit(self, stream: anyio.abc.SocketStream) -> None:
        try:
            self._connections.acquire_nowait()
        except anyio.WouldBlock:
            with contextlib.suppress(Exception):
                await _unavailable(_Side(stream, h11.SERVER), None)
            await stream.aclose()
            return
        try:
            await self._client(stream)
        finally:
            self._connections.release()

    async def _sweep(self) -> None:
        """Forget sessions no request named for twice the fronts' idle timeout (their front
        ended them by then)."""
        while self._forget_after is not None:
            await anyio.sleep(60)
            stale = time.monotonic() - self._forget_after
            for session, (front, seen) in list(self._owner.items()):
                if seen < stale:
                    del self._owner[session]
                    front.sessions.discard(session)

    def _pick(self, request: h11.Request) -> FrontProcess:
        session = _header(request.headers, _SESSION_HEADER)
        known = self._owner.get(session.decode("latin-1")) if session else None
        if known is not None and session is not None:
            self._owner[session.decode("latin-1")] = (known[0], time.monotonic())
            return known[0]
        if not request.target.startswith(b"/mcp"):
            return self._fronts[0]
        ready = [front for front in self._fronts if front.ready.is_set()] or self._fronts
        return min(ready, key=lambda front: len(front.sessions))

    async def _client(self, stream: anyio.abc.SocketStream) -> None:
        client = _Side(stream, h11.SERVER)
        upstreams: dict[int, _Side] = {}
        try:
            while True:
                with anyio.move_on_after(_IDLE_SECONDS):  # idle between requests: closed
                    event = await client.next_event()
                if not isinstance(event, h11.Request):
                    return  # closed, or idle too long (a protocol error: h11 raises)
                with anyio.fail_after(_HEAD_SECONDS):
                    body = await self._admit_request(client, event)
                if event.target.split(b"?")[0] == b"/healthz":
                    await self._health(client)
                else:
                    await self._route(client, upstreams, event, body)
                if client.conn.our_state is h11.MUST_CLOSE:
                    return
                client.conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:  # a request h11 will not read: say so, then close
            with contextlib.suppress(h11.ProtocolError, OSError, anyio.BrokenResourceError):
                await _refuse(client, exc.error_status_hint, str(exc))
        except (
            h11.ProtocolError,
            _Closed,
            OSError,
            TimeoutError,
            anyio.BrokenResourceError,
            anyio.EndOfStream,
        ):
            pass
        finally:
            for upstream in upstreams.values():
                await upstream.stream.aclose()
            await stream.aclose()

    async def _admit_request(self, client: _Side, request: h11.Request) -> bytes:
        """Check what the router can of a request before it holds its body: its framing, its
        Host, and on ``/mcp`` its bearer token (a request the front would refuse 401 never
        has its body read here); then read the body.

        Raises:
            h11.RemoteProtocolError: Refused (its status hint says how).
        """
        if _header(request.headers, b"transfer-encoding") and _header(request.headers, b"content-length"):
            # RFC 9112 lets a server read such a request by its chunks; this one refuses it.
            raise h11.RemoteProtocolError("both Transfer-Encoding and Content-Length", 400)
        if not _header(request.headers, b"host"):
            raise h11.RemoteProtocolError("a Host header is required", 400)
        if request.target.startswith(b"/mcp"):
            scheme, _, token = (_header(request.headers, b"authorization") or b"").partition(b" ")
            if scheme.lower() != b"bearer" or self._access.tenant_of(token.strip().decode("latin-1")) is None:
                raise h11.RemoteProtocolError(
                    "a valid bearer token is required (Authorization: Bearer ...)", 401
                )
        return await _body(client)

    async def _route(
        self, client: _Side, upstreams: dict[int, _Side], request: h11.Request, body: bytes
    ) -> None:
        """Forward one request to its front process: on a connection kept from an earlier
        request, tried once more on a new one when the front had closed it (an idle
        keep-alive); 503 when the front process is gone."""
        front = self._pick(request)
        for attempt in range(2):
            reused = front.index in upstreams
            try:
                upstream = upstreams.get(front.index)
                if upstream is None:
                    upstream = upstreams[front.index] = _Side(await _connect(front.socket_path), h11.CLIENT)
                await self._forward(client, upstream, request, body, front)
            except _FrontGone:
                gone = upstreams.pop(front.index, None)
                if gone is not None:
                    await gone.stream.aclose()
                if reused and attempt == 0:
                    continue
                if front.process is None or front.process.poll() is not None:
                    self._forget_front_session(request, front)  # it died: the session ended with it
                await _unavailable(client, front)
                return
            if upstream.conn.our_state is h11.MUST_CLOSE or upstream.conn.their_state is h11.MUST_CLOSE:
                await upstreams.pop(front.index).stream.aclose()
            else:
                upstream.conn.start_next_cycle()
            return

    async def _forward(
        self, client: _Side, upstream: _Side, request: h11.Request, body: bytes, front: FrontProcess
    ) -> None:
        # Framing is this router's (the body read whole): the client's framing and hop-by-hop
        # headers do not pass, so what reaches a front process is one request, as h11 read it.
        headers = [(name, value) for name, value in request.headers if name.lower() not in _HOP_HEADERS]
        headers.append((b"content-length", str(len(body)).encode()))
        try:
            await upstream.send(h11.Request(method=request.method, target=request.target, headers=headers))
            if body:
                await upstream.send(h11.Data(data=body))
            await upstream.send(h11.EndOfMessage())
            response = await upstream.next_event()
        except (OSError, h11.ProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise _FrontGone from exc
        if not isinstance(response, h11.Response):
            raise _FrontGone
        self._learn(request, response, front)
        await client.send(
            h11.Response(status_code=response.status_code, headers=response.headers, reason=response.reason)
        )
        gone = anyio.Event()
        finished = False
        async with anyio.create_task_group() as pump:
            # The client sends nothing while it waits for an answer: what it does send is the
            # next request (kept for later), and its end is a disconnect: the process's
            # connection closes too, as a direct client's would.
            pump.start_soon(_watch_for_disconnect, client, gone, pump.cancel_scope)
            while True:
                event = await upstream.next_event()
                if isinstance(event, h11.Data):
                    await client.send(h11.Data(data=event.data))
                elif isinstance(event, h11.EndOfMessage):
                    await client.send(h11.EndOfMessage(headers=event.headers))
                    finished = True
                    break
                else:
                    break  # the process closed its connection mid-answer
            pump.cancel_scope.cancel()
        if gone.is_set() or not finished:
            raise _Closed

    def _forget_front_session(self, request: h11.Request, front: FrontProcess) -> None:
        """The session a request named was on ``front``, which died."""
        asked = _header(request.headers, _SESSION_HEADER)
        known = self._owner.get(asked.decode("latin-1")) if asked else None
        if asked and known is not None and known[0] is front:
            session = asked.decode("latin-1")
            del self._owner[session]
            front.sessions.discard(session)

    def _learn(self, request: h11.Request, response: h11.Response, front: FrontProcess) -> None:
        """A session ``front`` opened (its ``initialize`` answered with its id), or closed
        (``DELETE``). A 404 changes nothing: another tenant's request for a session id is
        answered so too, and must not move the session."""
        asked = _header(request.headers, _SESSION_HEADER)
        given = _header(response.headers, _SESSION_HEADER)
        if given and not asked and 200 <= response.status_code < 300:
            session = given.decode("latin-1")
            self._owner[session] = (front, time.monotonic())
            front.sessions.add(session)
        elif asked and request.method == b"DELETE" and response.status_code < 300:
            session = asked.decode("latin-1")
            known = self._owner.get(session)
            if known is not None and known[0] is front:
                del self._owner[session]
                front.sessions.discard(session)

    async def _health(self, client: _Side) -> None:
        problems = []
        for front in self._fronts:
            status = await _probe(front)
            if status != 200:
                problems.append(f"front process {front.index}: {status or 'not answering'}")
        body = json.dumps(
            {"status": "failing", "problems": problems} if problems else {"status": "ok"}
        ).encode()
        await client.send(
            h11.Response(
                status_code=200 if not problems else 503,
                headers=[
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            )
        )
        await client.send(h11.Data(data=body))
        await client.send(h11.EndOfMessage())


async def _connect(path: str) -> anyio.abc.ByteStream:
    try:
        return await anyio.connect_unix(path)
    except OSError as exc:
        raise _FrontGone from exc


async def _refuse(client: _Side, status: int, why: str) -> None:
    body = json.dumps(
        {"error": "invalid_token" if status == 401 else "bad_request", "error_description": why}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer error="invalid_token"'))
    await client.send(h11.Response(status_code=status, headers=[*headers, (b"connection", b"close")]))
    await client.send(h11.Data(data=body))
    await client.send(h11.EndOfMessage())


async def _unavailable(client: _Side, front: FrontProcess | None) -> None:
    """503 with ``Retry-After``: the front process that served the request is gone (it is being
    started again; a session it held is answered for by another on the retry), or (None) the
    router holds as many connections as it takes."""
    message = (
        f"front process {front.index} stopped while serving this request; retry it (a session it "
        "held has ended: resume it with its Codemode-Resume secret)"
        if front is not None
        else f"the server holds {_MAX_CONNECTIONS} connections, its most; retry"
    )
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    await client.send(
        h11.Response(
            status_code=503,
            headers=[
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ],
        )
    )
    await client.send(h11.Data(data=body))
    await client.send(h11.EndOfMessage())


async def _watch_for_disconnect(client: _Side, gone: anyio.Event, scope: anyio.CancelScope) -> None:
    ahead = 0
    while True:
        try:
            data = await client.stream.receive(_READ_BYTES)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            data = b""
        ahead += len(data)
        if not data or ahead > _MAX_PENDING_BYTES:  # gone, or sending more than a next request
            gone.set()
            scope.cancel()
            return
        client.conn.receive_data(data)  # kept: the next request, read after this answer


async def _body(side: _Side) -> bytes:
    if side.conn.client_is_waiting_for_100_continue:  # (curl sends Expect: 100-continue)
        await side.send(h11.InformationalResponse(status_code=100, headers=[]))
    parts: list[bytes] = []
    size = 0
    while True:
        event = await side.next_event()
        if isinstance(event, h11.Data):
            size += len(event.data)
            if size > _MAX_BODY_BYTES:
                raise _Closed
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(parts)
        else:
            raise _Closed


async def _probe(front: FrontProcess) -> int | None:
    """The status a front process answers ``GET /healthz`` with; None when it does not."""
    if not front.ready.is_set():
        return None
    try:
        with anyio.fail_after(5):
            stream = await anyio.connect_unix(front.socket_path)
            side = _Side(stream, h11.CLIENT)
            try:
                await side.send(h11.Request(method="GET", target="/healthz", headers=[("host", "localhost")]))
                await side.send(h11.EndOfMessage())
                event = await side.next_event()
                return event.status_code if isinstance(event, h11.Response) else None
            finally:
                await stream.aclose()
    except (OSError, TimeoutError, h11.ProtocolError, anyio.BrokenResourceError):
        return None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return bytes(value)
    return None


async def serve_routed(
    options: HttpOptions,
    processes: int,
    front_argv: Callable[[int, str, str], list[str]],
    env: Mapping[str, str],
    announce: Callable[[str], None],
) -> None:
    """Listen where ``options`` say, start ``processes`` front processes and route requests to
    them (`Router`) until SIGINT or SIGTERM, which each front process is sent in turn.

    Args:
        options: Where to listen (the rest is the front processes' own).
        processes: How many (2 or more).
        front_argv: The command of front process ``i`` listening on the given Unix socket,
            behind the given address (``HOST:PORT``, the port bound).
        env: Their environment.
        announce: Called with the URL once every front process listens.

    Raises:
        UserError: The address cannot be bound.
    """
    sock = _listen(options.host, options.port)
    _raise_open_files_limit()
    bound = f"[{options.host}]" if ":" in options.host else options.host
    port = sock.getsockname()[1]
    url = f"http://{bound}:{port}{ENDPOINT}"
    run_dir = tempfile.mkdtemp(prefix="codemode-fronts-")  # mode 0700
    env = {**env, ROUTER_PID_VARIABLE: str(os.getpid())}
    fronts = [
        FrontProcess(i, front_argv(i, path, f"{bound}:{port}"), path, dict(env))
        for i, path in ((i, os.path.join(run_dir, f"front-{i}.sock")) for i in range(processes))
    ]
    router = Router(fronts, options.access(), options.idle_timeout_seconds)
    listener = await anyio.abc.SocketListener.from_socket(sock)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, router, group.cancel_scope)
            await router.run_fronts(group)
            announce(url)
            _warn_if_public(options.host)
            await router.serve(listener)
    finally:
        router.stop_fronts()
        await anyio.to_thread.run_sync(router.wait_fronts)
        shutil.rmtree(run_dir, ignore_errors=True)


async def _stop_on_signal(router: Router, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for _signum in received:
            router.stop_fronts()
            scope.cancel()
            return


def stop_with_router() -> int:
    """In a front process behind ``--processes``: be sent SIGTERM (and so stop as on it, ending
    its sessions) when the router dies, killed or out of memory, rather than hold sessions
    nobody routes to; exit at once if it is gone already.

    Returns:
        The router's pid (the one process the front takes connections from).

    Raises:
        UserError: This process was not started by a router (the variable is missing or
            names another process), or its router is gone.
    """
    expected = os.environ.pop(ROUTER_PID_VARIABLE, "")
    if not expected.isdigit():
        raise UserError("--behind is for front processes a router started (codemode mcp --processes N)")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(expected):  # it died before the line above took effect
        raise UserError("the router of this front process is gone")
    return int(expected)
