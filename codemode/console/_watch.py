"""What the console knows of programs: the host's spans (`codemode._trace.Watcher`) kept as runs
and their calls, in memory, the newest `RUNS_KEPT` per session; each change is also marked for
the state's journal (`take_changed`), where every front's console reads it.

A program's span (``execute_tool run_code``) becomes a `RunView` once the runner describes it
(its session, call id and source); a direct call's span (``execute_tool <tool>`` at the root) one
too, its source written as the call. Every span under a run becomes a `CallView`: a tool call, an
approval wait or a command, nested under the span it ran in. Each change is published as an
event (``run``, ``call``) to the console's streams of the run's tenant.

Spans arrive from any thread (an inline tool's call runs on the program's thread): one lock
guards the records; what is published is built under it, and sent after.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pydantic

from codemode._results import CallResult, RunResult
from codemode._trace import Watched
from codemode.state import JournalEntry

__all__ = ["RUNS_KEPT", "CallView", "RunView", "RunWatcher"]

RUNS_KEPT = 100  # runs kept per session (the newest)
SESSIONS_KEPT = 1000  # sessions whose runs are kept (the most recently active)
CALLS_KEPT = 500  # calls kept per run (the first; the rest counted)
_ARGS_MAX_CHARS = 2000  # a call's arguments as shown, cut to this
_SOURCE_MAX_CHARS = 256 * 1024  # a program's source as shown
_OUTPUT_MAX_CHARS = 256 * 1024  # a result's text as shown (the archive holds the rest)
_JOURNAL_TEXT_CHARS = 64 * 1024  # a source or an output as the journal keeps it for other fronts
_JOURNAL_ARGS_CHARS = 500  # a call's arguments as the journal keeps them
_BYTES_KEPT = 256 * 1024 * 1024  # all kept runs' sources, outputs and arguments: the oldest go first
_RUN_SPAN = "execute_tool run_code"
_TOOL_PREFIX = "execute_tool "

Publish = Callable[[str, object, str | None], None]


@dataclass
class CallView:
    """One span under a run: a tool call, an approval wait or a command."""

    id: str
    parent: str | None
    kind: str  # tool, approval, command
    name: str
    args: str
    started: float
    ended: float | None = None
    error: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "parent": self.parent,
            "kind": self.kind,
            "name": self.name,
            "args": self.args,
            "started": self.started,
            "duration_ms": None if self.ended is None else round((self.ended - self.started) * 1000, 3),
            "status": "running" if self.ended is None else ("error" if self.error else "ok"),
            # a call still running when its program ended was cancelled (asyncio's name for it)
            "code": "cancelled" if self.error == "CancelledError" else self.error,
        }


@dataclass
class RunView:
    """One program (or direct call) of a session as the console shows it."""

    session_id: str
    run_id: str
    source: str
    started: float
    ended: float | None = None
    calls: dict[int, CallView] = field(default_factory=dict)
    calls_dropped: int = 0
    attributes: Mapping[str, object] = field(default_factory=dict)
    result: RunResult | CallResult | None = None
    failed: str | None = None  # the error type of a span that ended without a result
    size: int = 0  # the characters it keeps (source, output, arguments), counted in the budget
    dropped: bool = False  # no longer kept (the budget, or newer runs): no longer counted

    def status(self) -> str:
        if self.ended is None:
            return "running"
        if isinstance(self.result, RunResult):
            return "ok" if self.result.ok else "error"
        if isinstance(self.result, CallResult):
            return "error" if self.result.code is not None else "ok"
        return "error" if self.failed else "ok"

    def summary(self) -> dict[str, object]:
        first = next((line for line in self.source.splitlines() if line.strip()), "")
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "status": self.status(),
            "started": self.started,
            "duration_ms": None if self.ended is None else round((self.ended - self.started) * 1000, 3),
            "first_line": first[:120],
            "calls": len(self.calls) + self.calls_dropped,
        }

    def detail(self) -> dict[str, object]:
        result = self.result
        output = "" if result is None else result.text
        error: dict[str, object] | None = None
        usage: dict[str, object] = {"output_tokens": None, "tool_calls": len(self.calls) + self.calls_dropped}
        refs: list[str] = []
        truncated = False
        if isinstance(result, RunResult):
            refs, truncated = result.refs, result.truncated
            usage = {"output_tokens": result.usage.output_tokens, "tool_calls": result.usage.tool_calls}
            if result.error is not None:
                e = result.error
                error = {"kind": e.kind, "name": e.name, "message": e.message, "line": e.line}
        elif isinstance(result, CallResult):
            truncated = result.truncated
            if result.code is not None:
                error = {"kind": "tool", "name": result.code.value, "message": result.text, "line": None}
        elif self.failed and self.ended is not None:
            error = {
                "kind": "host",
                "name": self.failed,
                "message": "the run ended with a host error",
                "line": None,
            }
        attributes = self.attributes
        return {
            **self.summary(),
            "source": self.source,
            "output": output,
            "truncated": truncated,
            "archive_ref": refs[0] if refs else None,
            "budget": {
                "max_output_tokens": attributes.get("codemode.limits.max_output_tokens"),
                "timeout_seconds": attributes.get("codemode.limits.timeout_seconds"),
            },
            "usage": usage,
            "error": error,
            "calls": [call.as_json() for call in self.calls.values()],
        }


class RunWatcher:
    """The console's `codemode._trace.Watcher`: spans in, runs kept, events out.

    Args:
        publish: Sends an event (name, data, tenant) to the console's streams; any thread.
        tenant_of: The tenant of a session (None: unknown, only a one-tenant console sees it).
        redact: Redacts a call's arguments (the host's redactor).
    """

    def __init__(
        self, publish: Publish, tenant_of: Callable[[str], str | None], redact: Callable[[str], str]
    ) -> None:
        self._publish = publish
        self._tenant_of = tenant_of
        self._redact = redact
        self._lock = threading.Lock()
        self._open: dict[int, RunView] = {}  # root span id -> its run, while it runs
        self._sessions: collections.OrderedDict[str, collections.deque[RunView]] = collections.OrderedDict()
        self._size = 0  # the characters all kept runs hold (RunView.size), at most _BYTES_KEPT
        self.activity: dict[str, float] = {}  # session -> its last activity (seconds since the epoch)
        self._changed: dict[int, RunView] = {}  # runs changed since `take_changed` (by id())

    # -- reading ----------------------------------------------------------------------------

    def runs(self, session_id: str) -> list[RunView]:
        """The session's kept runs, newest first."""
        with self._lock:
            return list(reversed(self._sessions.get(session_id, ())))

    def run(self, session_id: str, run_id: str) -> RunView | None:
        with self._lock:
            return next((r for r in self._sessions.get(session_id, ()) if r.run_id == run_id), None)

    def counts(self, session_id: str) -> int:
        with self._lock:
            return len(self._sessions.get(session_id, ()))

    def sessions(self) -> list[str]:
        """Sessions with kept runs, most recently active last."""
        with self._lock:
            return list(self._sessions)

    def take_changed(self) -> list[JournalEntry]:
        """The runs changed since the last call, as the state's journal keeps them (sources and
        outputs cut to 64 KiB, arguments to 500 characters)."""
        with self._lock:
            changed, self._changed = list(self._changed.values()), {}
            return [_journal_entry(run, self._tenant_of(run.session_id)) for run in changed]

    # -- the Watcher protocol ---------------------------------------------------------------

    def started(self, span: Watched) -> None:
        root = _root(span)
        if root is span:
            return  # a run shows once described (it knows its session then)
        with self._lock:
            run = self._open.get(root.id)
            if run is None:
                return
            if len(run.calls) >= CALLS_KEPT:
                run.calls_dropped += 1
                return
            call = self._call(span, root)
            run.calls[span.id] = call
            self._grow(run, len(call.args))
            self._changed[id(run)] = run
            event = {"session_id": run.session_id, "run_id": run.run_id, "call": call.as_json()}
            session = run.session_id
        self._send("call", event, session)

    def described(self, span: Watched) -> None:
        if span.parent is not None:
            return
        details = span.details
        session = details.get("session_id")
        if not isinstance(session, str):
            return
        if span.name == _RUN_SPAN:
            run_id = str(details.get("call_id") or f"run-{span.id}")
            source = str(details.get("source", ""))[:_SOURCE_MAX_CHARS]
        else:
            tool = span.name.removeprefix(_TOOL_PREFIX)
            run_id = str(details.get("call_id") or f"call-{span.id}")
            source = f"tools.{tool}({self._args_text(details.get('args'))})"
        run = RunView(session, run_id, source, span.started, attributes=span.attributes)
        with self._lock:
            self._open[span.id] = run
            kept = self._sessions.get(session)
            if kept is None:
                kept = self._sessions[session] = collections.deque()
                while len(self._sessions) > SESSIONS_KEPT:
                    old, runs = self._sessions.popitem(last=False)
                    for gone in runs:
                        self._drop(gone)
                    self.activity.pop(old, None)
            else:
                self._sessions.move_to_end(session)
            kept.append(run)
            if len(kept) > RUNS_KEPT:
                self._drop(kept.popleft())
            self._grow(run, len(source))
            self._changed[id(run)] = run
            self.activity[session] = time.time()
            summary = run.summary()
        self._send("run", summary, session)

    def ended(self, span: Watched) -> None:
        root = _root(span)
        with self._lock:
            run = self._open.get(root.id)
            if run is None:
                return
            if root is span:
                del self._open[span.id]
                run.ended = span.ended or time.time()
                result = span.details.get("result")
                if isinstance(result, RunResult | CallResult):
                    if len(result.text) > _OUTPUT_MAX_CHARS:  # (the archive keeps the whole text)
                        result = result.model_copy(update={"text": result.text[:_OUTPUT_MAX_CHARS]})
                    run.result = result
                    self._grow(run, len(result.text))
                run.failed = span.error
                self.activity[run.session_id] = run.ended
                name, event = "run", run.summary()
            else:
                call = run.calls.get(span.id)
                if call is None:
                    return
                call.ended = span.ended or time.time()
                call.error = span.error
                if call.kind == "command" and "codemode.process.id" in span.attributes:
                    call.args = f"{call.args} -> {span.attributes['codemode.process.id']}"
                name = "call"
                event = {"session_id": run.session_id, "run_id": run.run_id, "call": call.as_json()}
            session = run.session_id
            self._changed[id(run)] = run
        self._send(name, event, session)

    # -- helpers ----------------------------------------------------------------------------

    def _grow(self, run: RunView, chars: int) -> None:
        """Count what ``run`` keeps more; past the budget, drop the oldest runs of the least
        recently active sessions (under the lock)."""
        if run.dropped:
            return
        run.size += chars
        self._size += chars
        while self._size > _BYTES_KEPT and self._sessions:
            session, runs = next(iter(self._sessions.items()))
            if runs:
                self._drop(runs.popleft())
            if not runs:
                del self._sessions[session]

    def _drop(self, run: RunView) -> None:
        run.dropped = True
        self._size -= run.size

    def _send(self, name: str, event: object, session: str) -> None:
        self._publish(name, event, self._tenant_of(session))

    def _call(self, span: Watched, root: Watched) -> CallView:
        parent = None if span.parent is None or span.parent is root else str(span.parent.id)
        attributes = span.attributes
        if span.name.startswith(_TOOL_PREFIX):
            kind, name = "tool", str(attributes.get("gen_ai.tool.name", span.name.removeprefix(_TOOL_PREFIX)))
            args = self._args_text(span.details.get("args"))
        elif span.name == "codemode.approval":
            kinds = attributes.get("codemode.approval.kinds", ())
            tools = attributes.get("codemode.approval.tools", ())
            kind, name = "approval", "approval"
            args = ", ".join(f"{k} {t}" for k, t in zip(_strings(kinds), _strings(tools), strict=False))
        else:
            kind, name = "command", "bash"
            args = str(attributes.get("process.command_line", ""))
        return CallView(str(span.id), parent, kind, name, args, span.started)

    def _args_text(self, args: object) -> str:
        if args is None:
            return ""
        try:
            if isinstance(args, pydantic.BaseModel):
                text = args.model_dump_json(exclude_none=True)
            else:
                text = json.dumps(args, default=str)
        except Exception:  # an argument pydantic cannot serialise: its type is all we show
            text = f"<{type(args).__name__}>"
        text = self._redact(text)
        return text if len(text) <= _ARGS_MAX_CHARS else text[: _ARGS_MAX_CHARS - 1] + "…"


def _journal_entry(run: RunView, tenant: str | None) -> JournalEntry:
    detail = run.detail()
    detail["source"] = str(detail["source"])[:_JOURNAL_TEXT_CHARS]
    detail["output"] = str(detail["output"])[:_JOURNAL_TEXT_CHARS]
    calls = detail["calls"]
    if isinstance(calls, list):
        for call in calls:
            call["args"] = str(call["args"])[:_JOURNAL_ARGS_CHARS]
    return JournalEntry(run.session_id, run.run_id, tenant, run.started, run.status(), run.summary(), detail)


def _root(span: Watched) -> Watched:
    while span.parent is not None:
        span = span.parent
    return span


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []
