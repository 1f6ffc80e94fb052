"""The console: a page and a JSON interface at ``/console`` of the HTTP front
(`docs/console/API.md` lists every request).

`Console` is made once the host is open: it shows the host's programs (`RunWatcher`, fed by the
host's spans), the sessions the front holds (`SessionSource`), their background processes,
notifications, the workspace's trash and the operators' own actions (recorded in the state
directory), and with ``--approvals console`` it is the host's approval callback.

Sessions and programs also go through the state directory: it lists every session any front on
it holds (`HeldSessions.open_sessions`), writes its own programs to the state's journal and
follows the programs other fronts write there (`RunJournal`), about once a second; so the
console of any replica shows every replica's sessions. Every request
passes `Guard` (login cookie, same origin); every refusal is a `ConsoleError`, turned into
``{"error": ...}`` in one place (`_endpoint`).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
import anyio.to_thread
from sse_starlette import EventSourceResponse
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from codemode._ids import check_id
from codemode.console._approvals import ConsoleApprovals
from codemode.console._errors import ConsoleError
from codemode.console._events import Events
from codemode.console._guard import COOKIE, HEADERS, LOGIN_SECONDS, Guard, Login
from codemode.console._static import StaticFiles
from codemode.console._terminal import terminal_events
from codemode.console._watch import RunWatcher
from codemode.errors import HostFault, ProcessNotFound, ToolError, UserError
from codemode.host import Host
from codemode.policy import Decision
from codemode.sandbox import process_identity
from codemode.state import JournalChange, JournalEntry, OperatorAction

__all__ = ["Console", "ConsoleMode", "SessionInfo", "SessionSource"]

log = logging.getLogger("codemode.console")

_BODY_MAX_BYTES = 64 * 1024  # a console request's JSON body
_INPUT_MAX_CHARS = 16 * 1024  # keystrokes sent at once
_SESSIONS_KEPT = 1000  # ended sessions still listed (the most recent)
_NOTICES_KEPT = 200  # notices kept per session
_POLL_SECONDS = 1.0  # how often sessions and notifications are looked at for changes
_FAULT_LOG_SECONDS = 10.0  # at most one logged fault (with its traceback) per this long
_TRIM_SECONDS = 60.0  # how often the state's journal is trimmed to its bounds
_FOLLOWED_KEPT = 1000  # other fronts' running programs whose calls are followed
_OPERATOR = "a person at the console"  # who the model is told took a terminal over


class ConsoleMode(enum.StrEnum):
    """``--console``: on, read-only (no takeover, approvals, stops or trash), off."""

    ON = "on"
    READ_ONLY = "read-only"
    OFF = "off"


@dataclass(frozen=True)
class SessionInfo:
    """A session a front holds: whose it is, its client (``clientInfo.name``), when it opened;
    ``here``: this front holds it (else another on the state directory: its tenant may be
    unknown, None)."""

    session_id: str
    tenant: str | None
    client: str | None
    started: float
    here: bool = True


class SessionSource(Protocol):
    """The front's open sessions (the HTTP front's `ConnectionSessions`)."""

    def open_sessions(self) -> Sequence[SessionInfo]: ...
    def session_info(self, session_id: str) -> SessionInfo | None: ...


class Console:
    """The console of one HTTP front (see the module's docstring).

    Args:
        host: The open host.
        mode: on or read-only (off: make none).
        sessions: The front's open sessions.
        tenant_of_token: The tenant of a token, or None (the front's check).
        several: Whether the front has several tenants (each then sees only its own).
        host_allowed: Whether a ``Host`` header is one the front answers to.
        approvals: Be the host's approval callback (``--approvals console``).

    Raises:
        UserError: ``approvals`` with a read-only console (nobody could answer).
    """

    def __init__(
        self,
        host: Host,
        mode: ConsoleMode,
        sessions: SessionSource,
        tenant_of_token: Callable[[str], str | None],
        *,
        several: bool,
        host_allowed: Callable[[str], bool],
        approvals: bool = False,
    ) -> None:
        if approvals and mode is not ConsoleMode.ON:
            raise UserError("--approvals console needs a console that may answer them: --console on")
        self.host = host
        self.mode = mode
        self._source = sessions
        self._several = several
        self.guard = Guard(tenant_of_token, host_allowed)
        self.events = Events()
        redactor = host.archive.redactor
        self.watcher = RunWatcher(self.events.publish, self.tenant_of, redactor.redact)
        self.approvals = ConsoleApprovals(self.events.publish, self.tenant_of) if approvals else None
        self._static = StaticFiles()
        self._known: collections.OrderedDict[str, SessionInfo] = collections.OrderedDict()
        self._open: set[str] = set()
        # notices per session, the sessions most recently told last (at most _SESSIONS_KEPT)
        self._notices: collections.OrderedDict[str, collections.deque[dict[str, object]]] = (
            collections.OrderedDict()
        )
        self._notice_cursor = -1
        self._logged_fault = -math.inf  # when a fault was last logged (at most one per _FAULT_LOG_SECONDS)
        self._front = process_identity()  # as this front's writes to the journal are named
        self._elsewhere: dict[str, SessionInfo] = {}  # sessions other fronts hold open now
        self._journal_counts: dict[str, tuple[int, float]] = {}  # session -> runs, last start
        self._journal_cursor = -1  # the journal's seq seen (-1: not yet read)
        self._followed: collections.OrderedDict[tuple[str, str], dict[str, object]] = (
            collections.OrderedDict()
        )
        self._trimmed = -math.inf

    def install(self) -> None:
        """Start watching the host's programs (the front makes `approvals` its callback)."""
        self.host.watch(self.watcher)

    def uninstall(self) -> None:
        self.host.watch(None)

    def tenant_of(self, session_id: str) -> str | None:
        info = (
            self._known.get(session_id)
            or self._source.session_info(session_id)
            or self._elsewhere.get(session_id)
        )
        return None if info is None else info.tenant

    async def run(self) -> None:
        """Publish session changes and notifications as they come; keep the state's journal
        (until cancelled)."""
        self.events.bind()
        try:
            while True:
                try:
                    await self._sync_state()
                    self._poll_sessions()
                    await self._poll_notices()
                except HostFault as exc:  # the state database is down: one line a failure, no stack
                    log.warning("the console's upkeep failed (%s); trying again", exc)
                except Exception:  # the console's upkeep must never end the front
                    log.exception("the console's upkeep failed; trying again")
                await anyio.sleep(_POLL_SECONDS)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                # what ran since the last write: the journal keeps how the programs ended
                await anyio.to_thread.run_sync(self._write_journal)

    # -- the state directory ----------------------------------------------------------------

    async def _sync_state(self) -> None:
        """Write this front's changed programs to the journal, read what other fronts wrote
        and which sessions they hold; publish the changes."""
        changes, elsewhere = await anyio.to_thread.run_sync(self._exchange)
        self._elsewhere = elsewhere
        for change, calls in changes:
            self._publish_change(change, calls)

    def _write_journal(self) -> None:
        entries: list[JournalEntry] = self.watcher.take_changed()
        self.host.state.journal.write(self._front, entries)

    def _exchange(
        self,
    ) -> tuple[list[tuple[JournalChange, list[dict[str, object]] | None]], dict[str, SessionInfo]]:
        """(In a worker thread.) The journal's changes by other fronts (with the calls of those
        still running or just ended), and the sessions other fronts hold."""
        journal = self.host.state.journal
        self._write_journal()
        now = time.monotonic()
        if now - self._trimmed >= _TRIM_SECONDS:
            self._trimmed = now
            journal.trim()
        if self._journal_cursor < 0:  # what was written before this front came is listed, not replayed
            self._journal_cursor = journal.last_seq()
        changes: list[tuple[JournalChange, list[dict[str, object]] | None]] = []
        while True:
            batch = journal.changes(self._journal_cursor)
            for change in batch:
                self._journal_cursor = change.seq
                if change.holder == self._front:
                    continue
                calls = None
                key = (change.session_id, change.run_id)
                if change.summary.get("status") == "running" or key in self._followed:
                    detail = journal.detail(change.session_id, change.run_id)
                    found = None if detail is None else detail.get("calls")
                    calls = found if isinstance(found, list) else None
                changes.append((change, calls))
            if len(batch) < 200:
                break
        elsewhere = {
            held.session_id: SessionInfo(
                held.session_id, held.tenant, held.client, held.opened_at, here=False
            )
            for held in self.host.held.open_sessions()
            if held.holder != self._front
        }
        self._journal_counts = journal.counts(list(elsewhere))
        return changes, elsewhere

    def _publish_change(self, change: JournalChange, calls: list[dict[str, object]] | None) -> None:
        """Tell the console's streams of a program another front wrote: the run, and those of
        its calls that are new or changed since last told."""
        tenant = change.tenant
        self.events.publish("run", change.summary, tenant)
        key = (change.session_id, change.run_id)
        if calls is None:
            return
        told = self._followed.get(key)
        if told is None:
            told = self._followed[key] = {}
            while len(self._followed) > _FOLLOWED_KEPT:
                self._followed.popitem(last=False)
        for call in calls:
            call_id = str(call.get("id"))
            seen = (call.get("status"), call.get("duration_ms"), call.get("args"))
            if told.get(call_id) != seen:
                told[call_id] = seen
                event = {"session_id": change.session_id, "run_id": change.run_id, "call": call}
                self.events.publish("call", event, tenant)
        if change.summary.get("status") != "running":
            self._followed.pop(key, None)

    # -- what it shows ----------------------------------------------------------------------

    def _poll_sessions(self) -> None:
        now_open = {**self._elsewhere, **{info.session_id: info for info in self._source.open_sessions()}}
        changed = [info for sid, info in now_open.items() if sid not in self._open]
        ended = [sid for sid in self._open if sid not in now_open]
        for info in changed:
            self._known[info.session_id] = info
            self._known.move_to_end(info.session_id)
        self._open = set(now_open)
        while len(self._known) > _SESSIONS_KEPT + len(self._open):
            oldest = next(sid for sid in self._known if sid not in self._open)
            del self._known[oldest]
            self._notices.pop(oldest, None)
        for sid in [info.session_id for info in changed] + ended:
            known = self._known.get(sid)
            if known is not None:
                self.events.publish("session", self._session_json(known), known.tenant)

    async def _poll_notices(self) -> None:
        processes = self.host.processes
        while True:
            rows = await anyio.to_thread.run_sync(processes.notifications_since, self._notice_cursor, 200)
            if not rows:
                if self._notice_cursor < 0:
                    self._notice_cursor = 0
                return
            for session, note in rows:
                self._notice_cursor = max(self._notice_cursor, note.id)
                kind = "completion" if note.kind == "completion" else "monitor"
                item: dict[str, object] = {
                    "session_id": session,
                    "time": time.time(),
                    "kind": kind,
                    "text": note.text,
                }
                kept = self._notices.get(session)
                if kept is None:
                    kept = self._notices[session] = collections.deque(maxlen=_NOTICES_KEPT)
                    while len(self._notices) > _SESSIONS_KEPT:
                        self._notices.popitem(last=False)
                else:
                    self._notices.move_to_end(session)
                kept.append(item)
                self.events.publish("notice", item, self.tenant_of(session))
            if len(rows) < 200:
                return

    def _session_json(self, info: SessionInfo) -> dict[str, object]:
        journal_counts = self._journal_counts.get(info.session_id, (0, 0.0))
        policy = self.host.policy
        config = self.host.config
        if not config.network:
            network = "off"
        elif config.network_allow:
            network = f"allowlist ({len(config.network_allow)})"
        else:
            network = "on"
        return {
            "session_id": info.session_id,
            "client": info.client,
            "started": info.started,
            "last_activity": max(self.watcher.activity.get(info.session_id, info.started), journal_counts[1]),
            "sandbox": policy.mode.value,
            "network": network,
            "open": info.session_id in self._open,
            "here": info.here,
            "runs": self.watcher.counts(info.session_id) or journal_counts[0],
            "live_processes": None,
        }

    def _session(self, login: Login, session_id: str) -> str:
        """A session this login may look at.

        Raises:
            ConsoleError: 404, not a session of this login's tenant (or not a valid id).
        """
        try:
            check_id(session_id, "session_id")
        except UserError as exc:
            raise ConsoleError(404, str(exc)) from exc
        if self._several and self.tenant_of(session_id) != login.tenant:
            raise ConsoleError(404, f"no session {session_id!r} of yours is known here")
        return session_id

    def _visible(self, login: Login, tenant: str | None) -> bool:
        return not self._several or tenant == login.tenant

    # -- routes -----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        """The console's routes, mounted at ``/console``."""
        get, post = ["GET"], ["POST"]
        api: list[BaseRoute] = [
            Route("/me", self._endpoint(self._me), methods=get),
            Route("/sessions", self._endpoint(self._sessions), methods=get),
            Route("/sessions/{sid}/runs", self._endpoint(self._runs), methods=get),
            Route("/sessions/{sid}/runs/{run_id}", self._endpoint(self._run), methods=get),
            Route("/sessions/{sid}/archive/{ref}", self._endpoint(self._archive), methods=get),
            Route("/sessions/{sid}/processes", self._endpoint(self._processes), methods=get),
            Route("/sessions/{sid}/notices", self._endpoint(self._session_notices), methods=get),
            Route("/sessions/{sid}/processes/{pid}/stream", self._endpoint(self._stream), methods=get),
            Route(
                "/sessions/{sid}/processes/{pid}/takeover",
                self._endpoint(self._takeover, act=True),
                methods=post,
            ),
            Route(
                "/sessions/{sid}/processes/{pid}/input", self._endpoint(self._input, act=True), methods=post
            ),
            Route(
                "/sessions/{sid}/processes/{pid}/resize", self._endpoint(self._resize, act=True), methods=post
            ),
            Route("/sessions/{sid}/processes/{pid}/stop", self._endpoint(self._stop, act=True), methods=post),
            Route("/approvals", self._endpoint(self._approvals), methods=get),
            Route("/approvals/{aid}", self._endpoint(self._answer, act=True), methods=post),
            Route("/trash", self._endpoint(self._trash), methods=get),
            Route("/trash/empty", self._endpoint(self._trash_empty, act=True), methods=post),
            Route("/trash/{tid}/restore", self._endpoint(self._trash_restore, act=True), methods=post),
            Route("/actions", self._endpoint(self._actions), methods=get),
            Route("/events", self._endpoint(self._events), methods=get),
        ]
        return [
            Mount(
                "/console",
                routes=[
                    Route("/", self._page, methods=get),
                    Route("/static/{name:path}", self._static_file, methods=get),
                    Route("/login", self._endpoint(self._login, login=False), methods=post),
                    Route("/logout", self._endpoint(self._logout), methods=post),
                    Mount("/api", routes=api),
                ],
            ),
            Route("/console", self._page, methods=get),
        ]

    def _endpoint(
        self,
        handler: Callable[[Request, Login], Awaitable[object]],
        *,
        act: bool = False,
        login: bool = True,
    ) -> Callable[[Request], Awaitable[Response]]:
        """A handler behind the guard, its refusals (`ConsoleError`) and faults as JSON."""

        async def endpoint(request: Request) -> Response:
            try:
                self.guard.check_origin(request, post=request.method == "POST")
                who = self.guard.who(request) if login else Login("", 0.0)
                if act and self.mode is not ConsoleMode.ON:
                    raise ConsoleError(403, "this console is read-only (--console read-only): it only shows")
                answer = await handler(request, who)
            except ConsoleError as exc:
                answer = JSONResponse({"error": exc.message}, status_code=exc.status)
            except Exception as exc:  # a fault of the host: said, never a traceback
                now = time.monotonic()
                if now - self._logged_fault >= _FAULT_LOG_SECONDS:  # anyone may cause one: bounded
                    self._logged_fault = now
                    log.exception("console request %s failed", request.url.path)
                answer = JSONResponse(
                    {"error": f"the console failed on the host ({type(exc).__name__}); its log says more"},
                    status_code=500,
                )
            response = answer if isinstance(answer, Response) else JSONResponse(answer)
            response.headers.update(HEADERS)
            return response

        return endpoint

    async def _page(self, request: Request) -> Response:
        return self._static.response("index.html")

    async def _static_file(self, request: Request) -> Response:
        return self._static.response(str(request.path_params["name"]))

    async def _body(self, request: Request) -> dict[str, object]:
        raw = b""
        try:
            async for chunk in request.stream():
                raw += chunk
                if len(raw) > _BODY_MAX_BYTES:
                    raise ConsoleError(400, f"the request body is over {_BODY_MAX_BYTES} bytes")
        except ClientDisconnect as exc:
            raise ConsoleError(400, "the client went away before its request's body arrived") from exc
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError) as exc:
            why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
            raise ConsoleError(400, f"the request body is not JSON we read ({why})") from exc
        if not isinstance(body, dict):
            raise ConsoleError(400, "the request body must be a JSON object")
        return body

    # -- login ------------------------------------------------------------------------------

    async def _login(self, request: Request, _: Login) -> Response:
        body = await self._body(request)
        login_id, login = self.guard.login(body.get("token"))
        response = JSONResponse({"ok": True, "key": login.key})
        response.set_cookie(
            COOKIE,
            login_id,
            max_age=LOGIN_SECONDS,
            path="/console",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def _logout(self, request: Request, _: Login) -> Response:
        self.guard.logout(request)
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE, path="/console", httponly=True, samesite="strict")
        return response

    # -- reads ------------------------------------------------------------------------------

    async def _me(self, request: Request, login: Login) -> object:
        return {"mode": self.mode.value, "tenant": login.tenant, "approvals": self.approvals is not None}

    async def _sessions(self, request: Request, login: Login) -> object:
        self._poll_sessions()
        shown = [
            self._session_json(info) for info in self._known.values() if self._visible(login, info.tenant)
        ]
        live = await anyio.to_thread.run_sync(self._live_counts)
        for item in shown:
            item["live_processes"] = live.get(str(item["session_id"]), 0)
        return sorted(shown, key=lambda s: -float(str(s["last_activity"])))

    def _live_counts(self) -> dict[str, int]:
        counts: dict[str, int] = collections.Counter()
        for row in self.host.processes.list_processes(None):
            if row["state"] == "running":
                counts[row["session_id"]] += 1
        return counts

    async def _runs(self, request: Request, login: Login) -> object:
        """This front's runs of the session, and those another front ran (the journal)."""
        session = self._session(login, request.path_params["sid"])
        here = [run.summary() for run in self.watcher.runs(session)]
        known = {str(run["run_id"]) for run in here}
        journal = self.host.state.journal
        kept = await anyio.to_thread.run_sync(journal.summaries, session)
        merged = here + [run for run in kept if str(run.get("run_id")) not in known]
        return sorted(merged, key=lambda run: -float(str(run.get("started", 0))))

    async def _run(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        run_id = request.path_params["run_id"]
        run = self.watcher.run(session, run_id)
        if run is not None:
            return run.detail()
        journal = self.host.state.journal
        detail = await anyio.to_thread.run_sync(journal.detail, session, run_id)
        if detail is None:
            raise ConsoleError(404, "no such run kept (the console keeps the last 100 per session)")
        return detail

    async def _archive(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        offset, limit = _int_param(request, "offset", 0), min(_int_param(request, "limit", 16384), 262144)
        ref = request.path_params["ref"]
        try:
            page = await anyio.to_thread.run_sync(
                lambda: self.host.archive.read(ref, offset, limit, session_id=session)
            )
        except ToolError as exc:
            raise ConsoleError(404, str(exc)) from exc
        return {
            "text": page.data.decode("utf-8", "replace"),
            "offset": page.offset,
            "next_offset": page.next_offset,
            "total_bytes": page.total_bytes,
            "eof": page.eof,
        }

    async def _processes(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        processes = self.host.processes
        rows = await anyio.to_thread.run_sync(processes.list_processes, session)
        return [
            {
                "process_id": row["process_id"],
                "session_id": row["session_id"],
                "command": self.host.archive.redactor.one_line(row["command"], 500),
                "state": row["state"],
                "kind": row["kind"],
                "started": row["started"],
                "ended": row["ended"],
                "exit_code": row["exit_code"],
                "log_bytes": row["log_bytes"],
                "taken_over": processes.taken_over(row["process_id"]),
            }
            for row in rows
        ]

    async def _session_notices(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        return list(self._notices.get(session, ()))

    async def _approvals(self, request: Request, login: Login) -> object:
        if self.approvals is None:
            return []
        return [p.as_json() for p in self.approvals.pending(login.tenant if self._several else None)]

    async def _trash(self, request: Request, login: Login) -> object:
        self._one_tenant("the trash")
        entries = await anyio.to_thread.run_sync(self.host.trash.entries)
        return [
            {
                "id": e.id,
                "path": e.path,
                "kind": e.kind,
                "deleted": datetime.fromtimestamp(e.deleted_at, UTC).isoformat(timespec="seconds"),
                "size": None,
            }
            for e in reversed(entries)
        ]

    async def _actions(self, request: Request, login: Login) -> object:
        operators = self.host.state.operators
        actions = await anyio.to_thread.run_sync(
            lambda: operators.recent(200, login.tenant if self._several else None)
        )
        return [_action_json(a) for a in actions]

    async def _events(self, request: Request, login: Login) -> Response:
        subscription = self.events.subscribe(lambda tenant: self._visible(login, tenant))

        async def stream() -> AsyncIterator[dict[str, str]]:
            try:
                async for name, data in subscription.events():
                    yield {"event": name, "data": data}
            finally:
                self.events.unsubscribe(subscription)

        return EventSourceResponse(stream(), ping=15, headers=HEADERS)

    async def _stream(self, request: Request, login: Login) -> Response:
        session = self._session(login, request.path_params["sid"])
        pid = request.path_params["pid"]
        row = await self._process(session, pid)
        offset = _int_param(request, "offset", 0)
        events = terminal_events(self.host, session, pid, row, offset)
        return EventSourceResponse(events, ping=15, headers=HEADERS)

    async def _process(self, session: str, pid: str) -> Any:
        try:
            return await anyio.to_thread.run_sync(self.host.processes.process_row, session, pid)
        except ProcessNotFound as exc:
            raise ConsoleError(404, str(exc)) from exc

    # -- actions ----------------------------------------------------------------------------

    async def _record(self, login: Login, session: str | None, action: str, target: str, detail: str) -> None:
        """Keep what a person did, in the state directory, and show it."""
        done = OperatorAction(time.time(), login.tenant, session, action, target, detail)
        await anyio.to_thread.run_sync(self.host.state.operators.record, done)
        self.events.publish("action", _action_json(done), login.tenant if self._several else None)

    async def _takeover(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        pid = request.path_params["pid"]
        body = await self._body(request)
        on = body.get("on")
        if not isinstance(on, bool):
            raise ConsoleError(
                400, 'send {"on": true} to take the terminal over, {"on": false} to hand it back'
            )
        await self._process(session, pid)
        processes = self.host.processes
        if on:
            processes.take_over(pid, _OPERATOR)
        else:
            processes.hand_back(pid)
            with contextlib.suppress(ToolError):  # (ended meanwhile: no window to give back)
                await processes.restore_size(session, pid)
        await self._record(login, session, "takeover" if on else "handback", pid, "")
        return {"taken_over": processes.taken_over(pid)}

    async def _input(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        pid = request.path_params["pid"]
        text = (await self._body(request)).get("text")
        if not isinstance(text, str) or not text or len(text) > _INPUT_MAX_CHARS:
            raise ConsoleError(400, f'send {{"text": "..."}}: 1 to {_INPUT_MAX_CHARS} characters')
        await self._process(
            session, pid
        )  # (first: another session's process is not found, whatever its state)
        processes = self.host.processes
        if not processes.taken_over(pid):
            raise ConsoleError(409, "take the terminal over first (Take over), then type")
        try:
            written = await processes.write(session, pid, text, operator=True)
        except ToolError as exc:
            raise ConsoleError(409, str(exc)) from exc
        await self._record(login, session, "input", pid, self.host.archive.redactor.redact(text))
        return {"written": len(text), "answer": written}

    async def _resize(self, request: Request, login: Login) -> object:
        """The person's terminal size, given to the process's PTY while they have it (hand-back
        restores the size it started with, the one the model's reads render)."""
        session = self._session(login, request.path_params["sid"])
        pid = request.path_params["pid"]
        body = await self._body(request)
        rows, cols = body.get("rows"), body.get("cols")
        if (
            not isinstance(rows, int)
            or not isinstance(cols, int)
            or isinstance(rows, bool)
            or isinstance(cols, bool)
        ):
            raise ConsoleError(400, 'send {"rows": N, "cols": N} (whole numbers, 1-1000)')
        await self._process(session, pid)
        if not self.host.processes.taken_over(pid):
            raise ConsoleError(409, "take the terminal over first: its size is the model's otherwise")
        try:
            await self.host.processes.resize(session, pid, rows, cols)
        except ProcessNotFound as exc:
            raise ConsoleError(404, str(exc)) from exc
        except ToolError as exc:
            raise ConsoleError(409, str(exc)) from exc
        return {"rows": rows, "cols": cols}

    async def _stop(self, request: Request, login: Login) -> object:
        session = self._session(login, request.path_params["sid"])
        pid = request.path_params["pid"]
        try:
            stopped = await self.host.processes.stop(session, pid)
        except ToolError as exc:
            raise ConsoleError(409 if not isinstance(exc, ProcessNotFound) else 404, str(exc)) from exc
        self.host.processes.hand_back(pid)
        await self._record(login, session, "stop", pid, "")
        return stopped

    async def _answer(self, request: Request, login: Login) -> object:
        if self.approvals is None:
            raise ConsoleError(
                404, "this server asks approvals elsewhere (start it with --approvals console)"
            )
        body = await self._body(request)
        verdict, reason = body.get("decision"), body.get("reason")
        reason = reason.strip()[:500] if isinstance(reason, str) else ""
        if verdict == "allow":
            decision = Decision.allow()
        elif verdict == "allow_session":
            decision = Decision.allow_session()
        elif verdict == "deny":
            decision = Decision.deny(
                f"denied at the console: {reason}" if reason else "denied at the console"
            )
        else:
            raise ConsoleError(400, 'decision must be "allow", "allow_session" or "deny"')
        aid = request.path_params["aid"]
        item = self.approvals.answer(aid, decision, login.tenant if self._several else None)
        detail = f"{verdict}: {item.request.summary}" + (f" ({reason})" if reason else "")
        await self._record(login, item.request.session_id, "approval", aid, detail)
        return {"ok": True}

    async def _trash_restore(self, request: Request, login: Login) -> object:
        self._one_tenant("the trash")
        tid = request.path_params["tid"]
        try:
            entry = await anyio.to_thread.run_sync(self.host.trash.restore, tid)
        except ToolError as exc:
            raise ConsoleError(409, str(exc)) from exc
        await self._record(login, None, "trash_restore", tid, entry.path)
        return {"restored": entry.path}

    async def _trash_empty(self, request: Request, login: Login) -> object:
        self._one_tenant("the trash")
        count = await anyio.to_thread.run_sync(self.host.trash.empty)
        await self._record(login, None, "trash_empty", "trash", f"{count} entries")
        return {"emptied": count}

    def _one_tenant(self, what: str) -> None:
        if self._several:
            raise ConsoleError(
                403, f"{what} is the workspace's, shared by every tenant: only a one-tenant server shows it"
            )


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ConsoleError(400, f"{name} must be a whole number, got {value!r}") from exc
    if number < 0:
        raise ConsoleError(400, f"{name} must be 0 or more, got {number}")
    return number


def _action_json(action: OperatorAction) -> dict[str, object]:
    return {
        "time": action.at,
        "session_id": action.session_id,
        "action": action.action,
        "target": action.target,
        "detail": action.detail,
    }
