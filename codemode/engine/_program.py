"""One Code Mode program on its own thread: a fresh QuickJS context (`codemode.engine._qjs`),
its limits, its inline calls, and the host's side of its output, timers and end.

The program's JavaScript runs on the thread that runs `ProgramThread.run`, without the GIL.
Calls of inline tools and ``store``/``searchTools``/``describeTool`` cross into Python on this
thread and are answered at once (`ProgramThread._call_now`); every other tool call is posted
to the event loop through the program's ``_qjs.Channel``, where `codemode.engine._runtime`
checks it, runs it and posts its result back. The context holds no Python object the program
can reach: its two host functions take and return JSON text.
"""

from __future__ import annotations

import heapq
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codemode._images import archived_image
from codemode.engine import _qjs
from codemode.engine._bridge import (
    _FIRST_LOCATION,
    _MODULE_STATEMENT,
    _PREFIX,
    _SUFFIX,
    _from_js_json,
    _js_text,
    _to_json,
    error_json,
    failure_json,
    map_location,
    map_stack,
    result_payload,
)
from codemode.engine._outcome import (
    _CANCELLED,
    CallGate,
    EngineLimits,
    GuestError,
    ProgramCalls,
    ProgramOutcome,
)
from codemode.engine._output import PrintedOutput
from codemode.engine._typescript import TypeScriptError, strip_types
from codemode.engine._watchdog import WATCHDOG, Watch
from codemode.errors import ErrorCode, ToolError
from codemode.tools import ToolContext, ToolRegistry, ToolResult, failure_of

# ---- the program's thread -------------------------------------------------------------------

_STACK_OVERFLOW = ("call stack", "stack overflow")
# A program's first stretch on the event loop's thread (ProgramThread.first_stretch) runs at most
# this long: print(1) takes ~0.05 ms; the loop must never be held 10 ms.
_SLICE_SECONDS = 0.001
# What first_stretch returns when the program goes on, or starts over, on a worker.
WAITING = "waiting"
START_OVER = "start over"
_WAITING = WAITING  # what _loop returns where the program would wait (without ``wait``)
# Endings of a first stretch that are the program's own doing and stand as they are; any
# other (a limit) is met again on a worker, with the worker's full limits.
_OWN_ENDINGS = frozenset({"uncaught", "syntax_error", "deadlock"})


def _read_report(ctx: _qjs.Context) -> Any:
    """The prelude's report (``{pending: [[id, name]], unobserved: [id]}``), or None when JS
    cannot give it (its heap is full)."""
    try:
        return json.loads(ctx.report())
    except (_qjs.JSError, TypeError, ValueError):
        return None


def _engine_fault(exc: BaseException) -> GuestError:
    return GuestError("internal", type(exc).__name__, f"engine fault: {exc}")


@dataclass
class ProgramThread:
    """Runs one program; `run` is called on a worker thread and returns its outcome.

    Attributes:
        channel: The program's channel to the event loop (calls out, results in, stop).
        calls: What this thread shares with the loop's side of the program's calls.
        inline_json: The tools the prelude calls through hostCall (a JSON array): every
            other call is posted to the loop.
        gate: The host's approvals, asked here about inline calls.
    """

    source: str
    registry: ToolRegistry
    context: ToolContext
    limits: EngineLimits
    timeout_seconds: float
    channel: _qjs.Channel
    calls: ProgramCalls
    inline_json: str = "[]"
    gate: CallGate | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    on_output: Callable[[str], None] | None = None
    """Given each piece of printed text as the host collects it; must be thread-safe and
    must not block (the engine hands it to the event loop: `Engine.run`)."""

    def __post_init__(self) -> None:
        # Lone surrogates (non-UTF-8 input) cannot be compiled: they become U+FFFD.
        self.source = _js_text(self.source)
        self._output = PrintedOutput(self.limits.output_bytes_in_memory)
        self._done: tuple[bool, str, str] | None = None
        self._timers: list[tuple[float, int]] = []
        self._live_timers: set[int] = set()
        self._deadline = 0.0
        self._slice_cpu = 0.0  # CPU seconds its first stretch took on the loop's thread
        self._ctx: _qjs.Context | None = None
        self._watch: Watch | None = None  # the watchdog's view of this run, set in run()
        # Printed text held back while the first stretch runs: a stretch that starts over
        # was never seen, so its text must not be streamed.
        self._held: list[str] | None = None
        self._images: list[tuple[str, str]] = []

    @property
    def printed_chars(self) -> int:
        """Characters the program has printed so far, as collected when it last handed text
        to the host (before it waits for anything, and at 1 MiB); read from any thread, for
        progress reports."""
        return self._output.chars

    @property
    def tool_calls(self) -> int:
        """Tool calls the program has started so far (read from any thread)."""
        return self.calls.tool_calls

    # -- the run loop ---------------------------------------------------------------------

    def run(self, ctx: _qjs.Context) -> ProgramOutcome:
        """Run the program from its start on a fresh context (`prepare_context`), on this (a
        worker) thread. Never raises.

        Returns on completion, failure, deadlock or a limit.
        """
        cpu_start = time.thread_time()
        self._deadline = time.monotonic() + self.timeout_seconds
        self._ctx = ctx
        error: GuestError | str | None
        try:
            self._enter(ctx, self.limits.cpu_seconds)
            error = self._start(ctx)
            if error is None:
                error = self._loop(ctx, wait=True)
        except BaseException as exc:
            error = _engine_fault(exc)
        return self._outcome(ctx, error, cpu_start)

    def first_stretch(self, ctx: _qjs.Context) -> ProgramOutcome | str:
        """Run the program's first stretch here, on the event loop's thread: at most
        `_SLICE_SECONDS`, with no call into Python. Never raises.

        A program that ends within it needs no worker thread (two thread hand-offs, ~0.1 ms of
        a program that calls nothing: bench/bench_engine.py); the loop is held for at most the
        slice (well under the 10 ms no program may block it for).

        Returns:
            The outcome, when the program ended within it (done, or failed by its own doing);
            `WAITING` when it waits for a call it posted or a timer (it goes on on a worker,
            `resume`); `START_OVER` when it called into the host (an inline tool, the store),
            ran out of the slice's time or stack, or hit a limit: nothing it did took effect or
            was seen, and it runs again from its start on a worker (`run`, a new program).
        """
        cpu_start = time.thread_time()
        self._deadline = time.monotonic() + self.timeout_seconds
        self._ctx = ctx
        ctx.set_limits(self.limits.memory_bytes, self.limits.stack_bytes)
        if not ctx.set_slice(_SLICE_SECONDS, self.limits.stack_bytes):  # this thread's stack is too small
            self._ctx = None
            return START_OVER
        self._held = []
        error: GuestError | str | None
        try:
            error = self._start(ctx)
            if error is None:
                error = self._loop(ctx, wait=False)
        except BaseException as exc:
            error = _engine_fault(exc)
        finally:
            cut_short = ctx.slice_end is not None
            ctx.set_slice(0)
        self._slice_cpu = time.thread_time() - cpu_start
        held, self._held = self._held, None
        if cut_short or (
            error is not _WAITING and isinstance(error, GuestError) and error.kind not in _OWN_ENDINGS
        ):
            self._ctx = None
            return START_OVER
        if self.on_output is not None:
            for text in held:
                self.on_output(text)
        if error is _WAITING:
            return WAITING
        return self._outcome(ctx, error, cpu_start)

    def resume(self, ctx: _qjs.Context) -> ProgramOutcome:
        """Go on with a program whose first stretch waited (`first_stretch`), on this (a
        worker) thread. Never raises."""
        cpu_start = time.thread_time() - self._slice_cpu
        try:
            self._enter(ctx, self.limits.cpu_seconds - self._slice_cpu)
            error = self._loop(ctx, wait=True)
        except BaseException as exc:
            error = _engine_fault(exc)
        return self._outcome(ctx, error, cpu_start)

    def _enter(self, ctx: _qjs.Context, cpu_seconds: float) -> None:
        """Set the program up on this thread: its limits (this thread's stack), its host
        function, and the watchdog's watch (this thread's CPU clock)."""
        ctx.set_limits(self.limits.memory_bytes, self.limits.stack_bytes)
        ctx.set_host(self._call_now)
        self._watch = WATCHDOG.start(self.channel, cpu_seconds, self._deadline)
        if self.cancelled.is_set():  # cancelled before the watch existed (see cancel)
            WATCHDOG.cancel(self._watch)

    def _outcome(self, ctx: _qjs.Context, error: GuestError | str | None, cpu_start: float) -> ProgramOutcome:
        pending: dict[int, str] = {}
        unawaited: list[tuple[str, ToolResult]] = []
        unawaited_more = 0
        try:
            pending, unawaited, unawaited_more = self._report(ctx)
        except BaseException as exc:
            error = error or _engine_fault(exc)
        finally:
            self._disarm()
            ctx.set_host(None)  # (the host function refers back to this object)
            self._ctx = None
        assert error is not _WAITING
        return ProgramOutcome(
            output=self._output.text(),
            error=error if isinstance(error, GuestError) else None,
            tool_calls=self.calls.tool_calls,
            cancelled=list(pending.values()),
            pending_calls=pending,
            cpu_seconds=time.thread_time() - cpu_start,
            output_dropped_bytes=self._output.dropped,
            dropped_timers=len(self._live_timers),
            unawaited=unawaited,
            unawaited_more=unawaited_more,
            images=self._images,
        )

    def _report(self, ctx: _qjs.Context) -> tuple[dict[int, str], list[tuple[str, ToolResult]], int]:
        """The calls still pending at the end (id -> tool name), and what the calls of tools that
        change something did that settled but were never looked at (the prelude tracks them),
        with how many more there were than this keeps."""
        self._disarm()
        if ctx.outstanding == 0 and not self.calls.any_effects:
            return {}, [], 0  # no call pending, none that changed anything: nothing to ask JS
        report = _read_report(ctx)
        if report is None:
            return {}, [], 0
        pending = {int(call_id): str(name) for call_id, name in report["pending"]}
        unawaited, more = self.calls.unawaited(report["unobserved"])
        return pending, unawaited, more

    def cancel(self) -> None:
        """Stop the program as soon as possible, also in the middle of computing (any thread)."""
        self.cancelled.set()
        watch = self._watch
        if watch is not None:
            WATCHDOG.cancel(watch)
        self.channel.interrupt()

    def _disarm(self) -> None:
        """End the watchdog's hold on the program (idempotent; on the program's thread).

        Called before the output of a stopped program is collected from JS, which must not be
        interrupted again.
        """
        if self._watch is not None:
            WATCHDOG.release(self._watch)
        if self._ctx is not None:
            self._ctx.disarm()

    def _start(self, ctx: _qjs.Context) -> GuestError | None:
        """Compile the program and run it up to its first wait (or its end)."""
        if "\x00" in self.source:  # QuickJS's parser reads U+0000 as the end of the source
            return self._nul_in_source()
        registry = self.registry
        try:
            try:
                ctx.start(
                    self.channel,
                    _PREFIX + self.source + _SUFFIX,
                    self.limits.tool_data_bytes,
                    self.limits.calls_in_flight,
                    registry.effectful_names_json(),
                    registry.namespaces_json(),
                    self.inline_json,
                )
            except _qjs.JSError as exc:
                # Not JavaScript: TypeScript, its types blanked (lines and columns kept), compiles.
                if not str(exc).startswith("SyntaxError"):
                    raise
                try:
                    stripped = strip_types(self.source)
                except TypeScriptError as ts:
                    return GuestError("syntax_error", "TypeScriptError", str(ts), ts.line, ts.column)
                if stripped is None:
                    raise
                self.source = stripped
                ctx.start(
                    self.channel,
                    _PREFIX + stripped + _SUFFIX,
                    self.limits.tool_data_bytes,
                    self.limits.calls_in_flight,
                    registry.effectful_names_json(),
                    registry.namespaces_json(),
                    self.inline_json,
                )
        except _qjs.JSError as exc:
            text = str(exc)
            if text.startswith("SyntaxError"):
                return self._syntax_error(text)
            self._collect_rest()
            return self._limit_error(text)
        return None

    def _loop(self, ctx: _qjs.Context, *, wait: bool) -> GuestError | str | None:
        """Run the program to its end: None when it ended well, else its error; or, without
        ``wait``, `_WAITING` where it would wait for a call or a timer."""
        try:
            while True:
                event, drained = ctx.run(self._deadline, self._next_timer(), wait)
                if event == "drain":
                    assert drained is not None
                    self._drain(ctx, drained)
                    if self._done is not None:
                        return self._finish_error()
                elif event == "wait":
                    return _WAITING
                elif event == "timer":
                    self._fire_due(ctx)
                elif event == "idle":
                    self._collect_rest()
                    return GuestError(
                        "deadlock",
                        "Deadlock",
                        "the program is awaiting a promise that nothing can settle (no tool call "
                        "or timer is pending); every promise must be resolved by a tool call, a "
                        "timer, or your own code",
                    )
                elif event == "deadline":
                    self._collect_rest()
                    return self._timeout_error(self._waiting_for(ctx))
                else:  # "interrupted" while it waited: the watchdog stopped it, or the host cancelled it
                    self._collect_rest()
                    reason = self._watch.reason if self._watch is not None else None
                    if reason == "timeout":  # (the watchdog's interrupt came before the wait's own deadline)
                        return self._timeout_error(self._waiting_for(ctx))
                    return self._stopped_error(reason or "cancelled", None, None)
        except _qjs.JSError as exc:
            self._collect_rest()
            return self._limit_error(str(exc))

    def _next_timer(self) -> float:
        """When the next live timer is due (time.monotonic), or infinity."""
        timers = self._timers
        while timers and timers[0][1] not in self._live_timers:
            heapq.heappop(timers)
        return timers[0][0] if timers else math.inf

    def _fire_due(self, ctx: _qjs.Context) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, timer_id = heapq.heappop(self._timers)
            if timer_id in self._live_timers:
                self._live_timers.discard(timer_id)
                ctx.fire(timer_id)

    def _waiting_for(self, ctx: _qjs.Context) -> str:
        """The words " while waiting for <tools>" for a timeout message, or ""."""
        report = _read_report(ctx)
        if report is None:
            return ""
        names = sorted({str(name) for _, name in report["pending"]})
        return f" while waiting for {', '.join(names)}" if names else ""

    def _drain(self, ctx: _qjs.Context, raw: str) -> None:
        """Handle what the program queued for the host since the last drain."""
        print_bytes, messages = _from_js_json(raw)
        if print_bytes:
            self._append_output(ctx.take_output())
        for message in messages:
            kind = message[0]
            if kind == "timer":
                self._live_timers.add(message[1])
                heapq.heappush(self._timers, (time.monotonic() + message[2] / 1000.0, message[1]))
            elif kind == "untimer":
                self._live_timers.discard(message[1])
            elif kind == "done":
                self._done = (bool(message[1]), str(message[2]), str(message[3]))
            elif kind == "image":
                self._images.append((str(message[1]), str(message[2])))

    def _append_output(self, text: str) -> None:
        self._output.append(text)
        if self.on_output is not None and text:
            if self._held is not None:
                self._held.append(text)
            else:
                self.on_output(text)

    def _collect_rest(self) -> None:
        """Collect what the program printed and had not handed over, after it stopped (out of
        memory, interrupted, deadlocked): all at once, else piece by piece (the heap may be full)."""
        ctx = self._ctx
        if ctx is None:
            return
        self._disarm()
        try:
            self._append_output(ctx.take_output())
            return
        except _qjs.JSError:
            pass
        try:
            while (chunk := ctx.take_chunk()) is not None:
                self._append_output(chunk)
        except _qjs.JSError:
            pass

    # -- calls answered on this thread (hostCall) -------------------------------------------

    def _call_now(self, kind: str, call_id: int, name: str, payload_json: str, size: int) -> str:
        """The prelude's ``hostCall``: one call answered at once, from inside JS; never raises.

        Returns:
            "t"/"j"/"e" and the result's text, JSON or error JSON; or "q" for a call that is not
            an inline tool's (the prelude posts it to the loop instead).
        """
        try:
            payload = _from_js_json(payload_json)
            if kind == "sync":
                return self._sync(name, *payload)
            return self._inline(call_id, name, payload)
        except Exception as exc:  # a host fault must not reach the engine
            return "e" + failure_json(failure_of(exc, name))

    def _inline(self, call_id: int, name: str, arguments: Any) -> str:
        tool = self.registry.get(name)
        if tool is None or not tool.inline:
            return "q"  # the loop answers it (an unknown name too, with the same message)
        try:
            args = tool.parse(arguments)  # the one check (as parse_call makes it)
        except ToolError as exc:
            return "e" + failure_json(failure_of(exc, tool.name, prefix=False))
        if self.gate is not None:
            if self.gate.reads_files(tool, arguments):
                # This thread may be the loop's (the first stretch): the loop has it checked off it.
                return "q"
            need = self.gate.requests(tool, arguments, self.context.session_id)
            if isinstance(need, str):
                return "e" + error_json(ErrorCode.DENIED, f"{tool.name}: {need}", None)
            if need:
                return "q"  # it needs a decision: the loop holds it and asks
        self.calls.inline_calls += 1
        try:
            value = self.registry.invoke_inline(tool, args, self.context)
        except Exception as exc:  # a UserError from the handler: still only this call fails
            value = ToolResult.failed(failure_of(exc, tool.name))
        if tool.destructive is True:  # what the prelude tracks (effectful_names_json)
            self.calls.note_effect(call_id, tool.name, value)
        ok, text, is_text = result_payload(
            value, tool.name, self.calls.args_held, self.limits.tool_data_bytes
        )
        if not ok:
            return "e" + text
        return ("t" if is_text else "j") + text

    def _sync(self, op: str, a: Any, b: Any) -> str:
        try:
            value = self._sync_op(op, a, b)
        except Exception as exc:  # a refusal, or a host fault in the store: not the program thread's end
            return "e" + failure_json(failure_of(exc, op, prefix=False))
        payload = _to_json(value)
        if payload is None:
            return "e" + error_json(ErrorCode.TOOL_FAILED, f"{op} returned a value that is not JSON", None)
        return "j" + payload

    def _sync_op(self, op: str, a: Any, b: Any) -> Any:
        if op == "searchTools":
            limit = int(b) if isinstance(b, int | float) and b > 0 else 10
            return self.registry.search(str(a), limit=limit)
        if op == "describeTool":
            return self.registry.describe(str(a))
        if op == "toolNames":  # Object.keys(tools) and for...in (the prelude's __cm_tool_names)
            return self.registry.names()
        if op == "image.ref":  # image(descriptor): an image a tool returned, archived (the prelude checks it)
            return archived_image(self.context.archive, str(a), self.context.session_id)
        store = self.context.store
        if store is None:
            raise ToolError(f"{op}: this host gave the program no store", code=ErrorCode.TOOL_FAILED)
        if op == "store.get":
            raw = store.get(str(a))
            return None if raw is None else json.loads(raw)
        if op == "store.set":
            store.set(str(a), str(b))
            return None
        if op == "store.delete":
            return store.delete(str(a))
        if op == "store.keys":
            return store.keys()
        raise ToolError(f"unknown operation {op}", code=ErrorCode.TOOL_FAILED)

    # -- how it ended ------------------------------------------------------------------------

    def _timeout_error(self, waiting: str = "") -> GuestError:
        return GuestError(
            "timeout",
            "Timeout",
            f"the program ran past its {self.timeout_seconds:g} s wall-clock limit{waiting}; "
            "raise timeout_seconds in the // @run_code header or do less per program",
        )

    def _cpu_error(self, line: int | None = None, col: int | None = None) -> GuestError:
        return GuestError(
            "cpu_limit",
            "CpuLimit",
            f"the program used its {self.limits.cpu_seconds:g} s of JS CPU time (an endless loop?) "
            "and was interrupted",
            line,
            col,
        )

    def _stopped_error(self, reason: str, line: int | None, col: int | None) -> GuestError:
        """The error for a program the watchdog stopped, by its `Watch.reason`."""
        if reason == "cancelled":
            return _CANCELLED
        if reason == "cpu_limit":
            return self._cpu_error(line, col)
        return GuestError(
            "timeout",
            "Timeout",
            f"the program ran past its {self.timeout_seconds:g} s wall-clock limit while computing",
            line,
            col,
        )

    def _finish_error(self) -> GuestError | None:
        assert self._done is not None
        ok, value, error_text = self._done
        if ok:
            if error_text == "value" and value:
                self._append_output(value if value.endswith("\n") else value + "\n")
            return None
        info = json.loads(error_text)
        stack, line, col = map_stack(info.get("stack", ""))
        name = info.get("name", "Error")
        message = info.get("message", "")
        if name == "InternalError" and message in ("out of memory", "interrupted"):
            return self._limit_error(f"{name}: {message}\n{info.get('stack', '')}")
        if name == "RangeError" and "call stack" in message:
            return GuestError("stack_overflow", name, message + " (unbounded recursion?)", line, col, stack)
        if name == "ToolError":
            # Its stack is the call's (made where the program called the tool): line:column of the call.
            return GuestError(
                "uncaught", name, message, line, col, stack, tool=info.get("tool"), data=info.get("data")
            )
        thrown = info.get("thrown", "error")
        if thrown == "null":
            # QuickJS throws null when it cannot even allocate the out-of-memory error.
            return GuestError(
                "out_of_memory",
                "OutOfMemory",
                f"the program exceeded its memory limit of {self.limits.memory_bytes // (1024 * 1024)} MiB "
                "(QuickJS reports this as a thrown null; if the program threw null itself, throw an Error)",
            )
        if thrown != "error":
            return GuestError(
                "uncaught", "Uncaught", f"{message} (a thrown {thrown}; throw an Error to get its line)"
            )
        return GuestError("uncaught", name, message, line, col, stack)

    def _nul_in_source(self) -> GuestError:
        before = self.source[: self.source.index("\x00")]
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        return GuestError(
            "syntax_error",
            "SyntaxError",
            "the program contains a NUL character (U+0000); write it as \\u0000 inside a string",
            line,
            column,
        )

    def _syntax_error(self, text: str) -> GuestError:
        first_line = text.splitlines()[0] if text else "SyntaxError"
        name, _, message = first_line.partition(": ")
        m = _FIRST_LOCATION.search(text)
        line = col = None
        if m:
            line, col = map_location(int(m.group(1)), int(m.group(2)))
        source_lines = self.source.split("\n")
        at_line = source_lines[line - 1] if line is not None and 0 < line <= len(source_lines) else ""
        if "import" in message or "export" in message or _MODULE_STATEMENT.match(at_line):
            message += " (programs cannot import modules; use the tools object)"
        return GuestError("syntax_error", name or "SyntaxError", message, line, col)

    def _limit_error(self, text: str) -> GuestError:
        """The error for an exception that ended the program outside its own promise chain
        (a limit, or a timer callback that threw): ``text`` is the exception, then its stack."""
        first_line = text.splitlines()[0] if text else "InternalError"
        name, _, message = first_line.partition(": ")
        stack, line, col = map_stack(text)
        if any(marker in message for marker in _STACK_OVERFLOW):
            return GuestError(
                "stack_overflow", "RangeError", f"{message} (unbounded recursion?)", line, col, stack
            )
        if message == "out of memory":
            return GuestError(
                "out_of_memory",
                "OutOfMemory",
                f"the program exceeded its memory limit of {self.limits.memory_bytes // (1024 * 1024)} MiB",
                line,
                col,
            )
        if message == "interrupted":
            reason = self._watch.reason if self._watch is not None else None
            return self._stopped_error(reason or "cancelled", line, col)
        return GuestError("uncaught", name or "Error", message, line, col, stack)
