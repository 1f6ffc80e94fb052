"""One client session per upstream server per Host: connect, call, restart, refresh, close.

The session lives in a task of its own (its *owner*: the SDK's sessions and transports are
entered and left in one task), started on first use and shared by every program and call. The
owner pumps the transport's messages into the session so that it sees the transport end: a
stdio server that exits (or an HTTP stream that closes) ends the owner, calls in flight fail
with a clear error, and the next call starts the server again after a bounded backoff
(`BACKOFF_SECONDS`, by consecutive failures; reset by a successful call).
``notifications/tools/list_changed`` makes the owner list the tools again. A call its program
abandons is cancelled, and the SDK sends ``notifications/cancelled`` upstream.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from codemode._version import __version__
from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import SandboxMode, SandboxPolicy
from codemode.state import Redactor
from codemode.tools.upstream._config import McpServerConfig
from codemode.tools.upstream._stdio import sandboxed_stdio

__all__ = ["BACKOFF_SECONDS", "Connection", "Spawn"]

Spawn = Callable[[Callable[[], Coroutine[Any, Any, Any]]], None]
"""Starts a task that outlives its caller (the Host's loop spawner)."""

BACKOFF_SECONDS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_LOG_KEEP_BYTES = 256 * 1024  # a server log over 1 MiB keeps its last 256 KiB at each start
_LOG_MAX_BYTES = 1024 * 1024
_STDERR_TAIL = 600


class Connection:
    """The client side of one upstream server.

    Args:
        config: The server.
        spawn: Starts the owner task.
        log_path: The server's log (its stderr, and a line per start and end).
        workspace: Default working directory of a stdio server.
        policy: The host's sandbox policy, for a server configured with ``sandbox``.
        redactor: The host's redactor (the server's own secrets are added).
        on_tools: Called (on the loop) whenever the tool list is (re)read.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        spawn: Spawn,
        log_path: Path,
        workspace: Path,
        policy: Callable[[], SandboxPolicy],
        redactor: Redactor,
        on_tools: Callable[[Connection], None],
    ) -> None:
        self.config = config
        self.log_path = log_path
        self.tools: list[types.Tool] = []
        self.server_info: types.Implementation | None = None
        self.last_error: str | None = None
        self._spawn = spawn
        self._workspace = workspace
        self._policy = policy
        self._secrets = config.redactor()
        self._host_redactor = redactor
        self._on_tools = on_tools
        self._session: ClientSession | None = None
        self._stop: anyio.Event | None = None
        self._ended = anyio.Event()
        self._ended.set()  # no owner yet
        self._lock = anyio.Lock()
        self._failures = 0
        self._last_end = 0.0
        self._closing = False
        self._task_group: anyio.abc.TaskGroup | None = None
        self._http_refusal: str | None = None  # the last HTTP error status the server answered

    # -- redaction ----------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with the server's configured secrets and every host secret redacted."""
        return self._host_redactor.redact(self._secrets.redact(text))

    @property
    def connected(self) -> bool:
        """Whether a session is up."""
        return self._session is not None and self._stop is not None and not self._stop.is_set()

    def retry_due(self) -> bool:
        """Whether a try to connect is due: not connected, no owner running, and the backoff
        after the last failure (`BACKOFF_SECONDS`) over."""
        if self.connected or not self._ended.is_set():
            return False
        delay = BACKOFF_SECONDS[min(self._failures, len(BACKOFF_SECONDS) - 1)]
        return self._last_end == 0.0 or time.monotonic() >= self._last_end + delay

    # -- lifecycle ----------------------------------------------------------------------

    async def session(self) -> ClientSession:
        """The live session, connecting (or restarting) first when there is none.

        Raises:
            ToolError: The server cannot be started or reached (code ``upstream_unavailable``;
                the message says why and ends with its stderr's last lines).
        """
        session = self._session
        if session is not None and self._stop is not None and not self._stop.is_set():
            return session
        async with self._lock:
            if self.connected:
                assert self._session is not None
                return self._session
            await self._ended.wait()  # an owner still winding down
            delay = BACKOFF_SECONDS[min(self._failures, len(BACKOFF_SECONDS) - 1)]
            wait = self._last_end + delay - time.monotonic()
            if wait > self.config.timeout:
                raise self._unavailable(
                    f"it failed {self._failures} times in a row; the next try is in {wait:.0f} s"
                )
            if wait > 0:
                await anyio.sleep(wait)
            ready = anyio.Event()
            self._stop = anyio.Event()
            self._ended = anyio.Event()
            self.last_error = None
            self._spawn(lambda: self._own(ready))
            with anyio.move_on_after(self.config.connect_timeout + 5):
                await ready.wait()
            if self._session is None:
                raise self._unavailable(self.last_error or "it did not start in time")
            return self._session

    def _unavailable(self, why: str) -> ToolError:
        tail = self.stderr_tail()
        message = f"MCP server {self.config.name!r} is not available: {why}"
        if tail:
            message += f". Its log ends: {tail}"
        return ToolError(
            self.redact(message),
            {"server": self.config.name},
            code=ErrorCode.UPSTREAM_UNAVAILABLE,
        )

    def _transport(self, errlog: Any) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        config = self.config
        if config.url is not None:
            client = create_mcp_http_client(headers=dict(config.headers) or None)
            self._http_refusal = None

            async def note_refusal(response: Any) -> None:
                # The SDK answers an HTTP error status with a generic JSON-RPC error; keep the
                # status, which says what is wrong (401: the headers).
                if response.status_code >= 400:
                    self._http_refusal = f"HTTP {response.status_code} {response.reason_phrase}".strip()

            client.event_hooks["response"].append(note_refusal)
            return _with_client(client, streamable_http_client(config.url, http_client=client))
        assert config.command is not None
        cwd = str(Path(config.cwd).expanduser()) if config.cwd else str(self._workspace)
        # An upstream server gets only the MCP SDK's few safe variables (HOME, PATH, SHELL,
        # TERM, USER, LOGNAME) and what its configuration names; never the host's environment,
        # which may hold its own secrets (tests/security/test_host_credentials.py).
        if config.sandbox is None:
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=config.env, cwd=cwd
            )
            return stdio_client(params, errlog=errlog)
        policy = self._policy().with_mode(SandboxMode(config.sandbox))
        return sandboxed_stdio(
            [config.command, *config.args],
            cwd=cwd,
            env={**get_default_environment(), **config.env},
            policy=policy,
            stderr_fd=errlog.fileno(),
        )

    async def _own(self, ready: anyio.Event) -> None:
        """The owner task: open the transport and session, serve until stopped or ended."""
        stop = self._stop
        assert stop is not None
        errlog = self._open_log()
        clean = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(errlog))
                group = await stack.enter_async_context(anyio.create_task_group())
                self._task_group = group
                session = await stack.enter_async_context(
                    ClientSession(
                        _Watched(read, lambda: self._transport_ended(stop)),
                        write,
                        message_handler=self._on_message,
                        client_info=types.Implementation(name="codemode", version=__version__),
                    )
                )
                with anyio.fail_after(self.config.connect_timeout):
                    init = await session.initialize()
                    self.server_info = init.server_info
                    self.tools = await _list_tools(session)
                self._session = session
                self._log(
                    f"connected: {init.server_info.name} {init.server_info.version}, {len(self.tools)} tools"
                )
                self._on_tools(self)
                ready.set()
                await stop.wait()
                clean = self._closing
        except Exception as exc:  # every failure is a reason shown to the model
            reason = _reason(exc)
            if self._http_refusal is not None:
                hint = (
                    ' (check its "headers")'
                    if self._http_refusal.startswith(("HTTP 401", "HTTP 403"))
                    else ""
                )
                reason = f"the server answered {self._http_refusal}{hint}: {reason}"
            self.last_error = self.redact(reason)
            self._log(f"failed: {self.last_error}")
        finally:
            self._session = None
            self._task_group = None
            stop.set()
            if not clean:
                self._failures += 1
            self._last_end = time.monotonic()
            with contextlib.suppress(OSError):
                errlog.write(f"--- ended {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
                errlog.close()
            ready.set()
            self._ended.set()

    def _transport_ended(self, stop: anyio.Event) -> None:
        """The transport's read stream ended: a stdio server exited, an HTTP stream closed."""
        if not self._closing and not stop.is_set():
            self.last_error = "the server closed the connection (a stdio server exited)"
            self._log(self.last_error)
        stop.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._task_group is not None:
            self._task_group.start_soon(self._refresh)
        await anyio.lowlevel.checkpoint()

    async def _refresh(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            self.tools = await _list_tools(session)
        except Exception as exc:
            self._log(f"listing the tools again failed: {_reason(exc)}")
            return
        self._log(f"tools changed: {len(self.tools)} tools")
        self._on_tools(self)

    async def aclose(self) -> None:
        """Stop the session (and a stdio server's process); wait for the owner to end."""
        self._closing = True
        if self._stop is not None:
            self._stop.set()
        with anyio.move_on_after(10):
            await self._ended.wait()
        self._closing = False

    # -- calls --------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Call one upstream tool (its original name).

        Raises:
            ToolError: Codes ``upstream_unavailable`` (not reachable, or it stopped during the
                call), ``upstream_timeout`` (over the per-call timeout; cancelled upstream),
                ``upstream_error`` (the server answered with a protocol error).
        """
        session = await self.session()
        label = f"{self.config.name}.{tool}"
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=self.config.timeout)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                raise self._unavailable(
                    "it stopped while this call was in flight, so the call did not finish (it may "
                    "or may not have taken effect); the server is started again on the next call"
                ) from None
            if exc.error.code == types.REQUEST_TIMEOUT:
                raise ToolError(
                    f"MCP tool {label} did not answer within {self.config.timeout:g} s, so it was "
                    'cancelled; set a larger "timeout" for this server if it needs longer',
                    {"timeout": self.config.timeout},
                    code=ErrorCode.UPSTREAM_TIMEOUT,
                ) from None
            raise ToolError(
                self.redact(f"MCP server {self.config.name!r} refused the call: {exc.error.message}"),
                {"rpc_code": exc.error.code},
                code=ErrorCode.UPSTREAM_ERROR,
            ) from None
        except (RuntimeError, ValueError) as exc:  # e.g. structured content against its outputSchema
            raise ToolError(
                self.redact(f"MCP server {self.config.name!r} gave an invalid result: {exc}"),
                code=ErrorCode.UPSTREAM_ERROR,
            ) from None
        self._failures = 0
        return result

    # -- the log ------------------------------------------------------------------------

    def _open_log(self) -> Any:
        path = self.log_path
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if path.stat().st_size > _LOG_MAX_BYTES:
                with open(path, "rb") as old:
                    old.seek(-_LOG_KEEP_BYTES, os.SEEK_END)
                    kept = old.read()
                path.write_bytes(b"[earlier lines dropped]\n" + kept)
        log = open(path, "a", encoding="utf-8", errors="replace", opener=_private)
        log.write(f"--- started {time.strftime('%Y-%m-%d %H:%M:%S')}: {self.config.name} ---\n")
        log.flush()
        return log

    def _log(self, line: str) -> None:
        with contextlib.suppress(OSError), open(self.log_path, "a", encoding="utf-8", opener=_private) as log:
            log.write(f"[codemode] {line}\n")

    def stderr_tail(self) -> str:
        """The last lines of the server's log since its last start, redacted, as one line."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - 8192))
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        text = text.rsplit("--- started", 1)[-1].split("\n", 1)[-1]
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("--- ", "[codemode] "))]
        joined = " | ".join(lines)[-_STDERR_TAIL:]
        return self.redact(joined)


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


class _Watched:
    """The transport's read stream as the session reads it, calling ``on_end`` when it ends
    (one method call per message, where a pump task and a second stream would cost a hop)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _with_client(client: Any, transport: Any) -> Any:
    async with client, transport as streams:
        yield streams


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _reason(exc: BaseException) -> str:
    """A one-line reason for a failure to connect."""
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        if inner:
            return _reason(inner[0])
    if isinstance(exc, TimeoutError):
        return "it did not answer the MCP handshake in time"
    if isinstance(exc, FileNotFoundError):
        return f"the command was not found ({exc.filename or exc})"
    if isinstance(exc, MCPError):
        if exc.error.code == types.CONNECTION_CLOSED:
            return "the server closed the connection before the MCP handshake finished (did it exit?)"
        return f"{exc.error.message} (MCP error {exc.error.code})"
    text = str(exc) or type(exc).__name__
    name = type(exc).__name__
    return text if name in text else f"{name}: {text}"
