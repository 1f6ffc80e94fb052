"""The JavaScript side of one program's run, with nothing but the standard library and the bridge.

`GuestRun` drives a fresh QuickJS context (`codemode.engine._qjs`) from its start to its end:
compiles the wrapped program, runs it, keeps its timers and printed text, and says how it ended
(`GuestEnd`). What the program asks of the host crosses two seams it is given: ``host_call``
(the prelude's ``hostCall``: inline tools and the store, answered at once) and the channel (every
other tool call, answered by the event loop). In thread mode both lead straight into the host's
objects (`codemode.engine._program`); in a worker process they are sockets to the host
(`codemode.engine.worker`), and this module is all of the engine the worker holds.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from codemode.engine import _qjs
from codemode.engine._output import PrintedOutput
from codemode.engine._text import (
    _FIRST_LOCATION,
    _MODULE_STATEMENT,
    _PREFIX,
    _SUFFIX,
    _from_js_json,
    _js_text,
    map_location,
    map_stack,
)
from codemode.engine._watchdog import WATCHDOG, Watch

_MIB = 1024 * 1024


@dataclass(frozen=True)
class EngineLimits:
    """Limits of one program.

    Attributes:
        memory_bytes: QuickJS heap limit (default 256 MiB).
        stack_bytes: QuickJS stack limit (default 1 MiB).
        cpu_seconds: CPU time the program's own thread may use in all (default 30 s).
        tool_concurrency: Tool calls of one program running at once (default 32).
        tool_data_bytes: Tool-call data the host holds for one program at a time: the
            arguments of its calls that are queued or running plus the result being handed
            to it, counted in characters of JSON text (default 64 MiB). A call that would
            go beyond it fails with an error that says so.
        output_bytes_in_memory: Printed text the host holds for one program, in characters
            (default 8 MiB): its first half and its last half are kept, what lies between is
            dropped and a line in the output says how much (a program printing in a loop grew
            the host past 1.4 GiB when this was 256 MiB: the text is copied several times on
            its way to the model and the archive).
        calls_in_flight: Calls of one program the host holds at once, running or waiting to
            run (default 10,000): one more fails with ``tool_data_limit``. (A program that
            starts calls in a loop without awaiting them cannot make the host hold millions.)
    """

    memory_bytes: int = 256 * _MIB
    stack_bytes: int = _MIB
    cpu_seconds: float = 30.0
    tool_concurrency: int = 32
    tool_data_bytes: int = 64 * _MIB
    output_bytes_in_memory: int = 8 * _MIB
    calls_in_flight: int = 10_000


@dataclass(frozen=True)
class GuestError:
    """How a program failed, as data.

    Attributes:
        kind: ``syntax_error``, ``uncaught``, ``cpu_limit``, ``timeout``,
            ``out_of_memory``, ``stack_overflow``, ``deadlock``, ``engine_crashed`` or
            ``internal``.
        name: The JS error name (``TypeError``, ``ToolError``, ...).
        message: The message.
        line: Line in the model's source, when known.
        column: Column in the model's source, when known.
        stack: Stack trace mapped to the model's lines (prelude frames dropped).
        tool: For a ``ToolError``, the tool that failed.
    """

    kind: str
    name: str
    message: str
    line: int | None = None
    column: int | None = None
    stack: str = ""
    tool: str | None = None
    data: str | None = None

    def describe(self) -> str:
        """The lines the model sees for this error."""
        where = f" (line {self.line}:{self.column})" if self.line is not None else ""
        if self.kind == "uncaught" and self.name == "Uncaught":  # a thrown non-Error value
            head = f"Uncaught {self.message}{where}"
        else:
            prefix = "Uncaught " if self.kind == "uncaught" else ""
            head = f"{prefix}{self.name}: {self.message}{where}"
        if self.data and self.data != "null":
            head += f"\n  data: {self.data}"
        if self.stack:
            head += "\n" + self.stack
        return head


CANCELLED = GuestError("cancelled", "Cancelled", "the run was cancelled by the host")


@dataclass
class GuestEnd:
    """How a program's JavaScript ended, before the host adds what only it knows (what its
    calls did): plain data, so that a worker process can send it as JSON.

    Attributes:
        pending: The calls still pending at the end (id -> tool name).
        unobserved: Calls of tools that change things which settled but were never looked at.
    """

    output: str
    error: GuestError | None
    cpu_seconds: float
    output_dropped_bytes: int = 0
    dropped_timers: int = 0
    pending: dict[int, str] = field(default_factory=dict)
    unobserved: list[int] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> GuestEndJson:
        """The fields as JSON values (a worker's last message)."""
        error = self.error
        return {
            "output": self.output,
            "error": None
            if error is None
            else {
                "kind": error.kind,
                "name": error.name,
                "message": error.message,
                "line": error.line,
                "column": error.column,
                "stack": error.stack,
                "tool": error.tool,
                "data": error.data,
            },
            "cpu_seconds": self.cpu_seconds,
            "output_dropped_bytes": self.output_dropped_bytes,
            "dropped_timers": self.dropped_timers,
            "pending": list(self.pending.items()),
            "unobserved": list(self.unobserved),
            "images": list(self.images),
        }

    @classmethod
    def from_json(cls, data: GuestEndJson) -> GuestEnd:
        """What `to_json` gave, back (from a worker, which may lie: only the types are trusted)."""
        error = data.get("error")
        return cls(
            output=str(data["output"]),
            error=None if error is None else _error_of(error),
            cpu_seconds=float(data["cpu_seconds"]),
            output_dropped_bytes=int(data["output_dropped_bytes"]),
            dropped_timers=int(data["dropped_timers"]),
            pending={int(call_id): str(name) for call_id, name in data["pending"]},
            unobserved=[int(call_id) for call_id in data["unobserved"]],
            images=[(str(mime), str(b64)) for mime, b64 in data["images"]],
        )


class GuestErrorJson(TypedDict):
    """`GuestError`'s fields as JSON (in `GuestEndJson`)."""

    kind: str
    name: str
    message: str
    line: int | None
    column: int | None
    stack: str
    tool: str | None
    data: str | None


class GuestEndJson(TypedDict):
    """`GuestEnd.to_json`: how a program ended, as a worker sends it (``pending`` as pairs)."""

    output: str
    error: GuestErrorJson | None
    cpu_seconds: float
    output_dropped_bytes: int
    dropped_timers: int
    pending: list[tuple[int, str]]
    unobserved: list[int]
    images: list[tuple[str, str]]


class EngineLimitsJson(TypedDict):
    """`EngineLimits`'s fields as JSON (in a worker's run message)."""

    memory_bytes: int
    stack_bytes: int
    cpu_seconds: float
    tool_concurrency: int
    tool_data_bytes: int
    output_bytes_in_memory: int
    calls_in_flight: int


def limits_json(limits: EngineLimits) -> EngineLimitsJson:
    """The limits as a worker takes them (``EngineLimits(**limits_json(limits))`` is equal)."""
    return {
        "memory_bytes": limits.memory_bytes,
        "stack_bytes": limits.stack_bytes,
        "cpu_seconds": limits.cpu_seconds,
        "tool_concurrency": limits.tool_concurrency,
        "tool_data_bytes": limits.tool_data_bytes,
        "output_bytes_in_memory": limits.output_bytes_in_memory,
        "calls_in_flight": limits.calls_in_flight,
    }


def _error_of(data: GuestErrorJson) -> GuestError:
    """A `GuestErrorJson` back (its optional fields may be missing; others are ignored)."""
    return GuestError(
        kind=str(data["kind"]),
        name=str(data["name"]),
        message=str(data["message"]),
        line=data.get("line"),
        column=data.get("column"),
        stack=str(data.get("stack", "")),
        tool=data.get("tool"),
        data=data.get("data"),
    )


# A program's first stretch on the event loop's thread (GuestRun.first_stretch) runs at most
# this long: print(1) takes ~0.05 ms; the loop must never be held 10 ms.
_SLICE_SECONDS = 0.001
# What first_stretch returns when the program goes on, or starts over, on a worker.
WAITING = "waiting"
START_OVER = "start over"
# Endings of a first stretch that are the program's own doing and stand as they are; any
# other (a limit) is met again on a worker, with the worker's full limits.
_OWN_ENDINGS = frozenset({"uncaught", "syntax_error", "deadlock"})
_STACK_OVERFLOW = ("call stack", "stack overflow")

HostCall = Callable[[str, int, str, str, int], str]
"""The prelude's ``hostCall``: (kind, call id, name, payload JSON, size) -> "t"/"j"/"e"/"q" + text."""
Strip = Callable[[str], "str | GuestError | None"]
"""A source QuickJS rejected, as JavaScript with its TypeScript types blanked; None when it is not
TypeScript; a GuestError when it is TypeScript that does not parse."""


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
class GuestSpec:
    """What a run needs besides its seams: plain data (a worker gets it as JSON)."""

    source: str
    limits: EngineLimits
    timeout_seconds: float
    effectful_json: str = "[]"
    namespaces_json: str = "{}"
    inline_json: str = "[]"


class GuestRun:
    """One program's JavaScript from its start to its end on the thread that calls `run`.

    Args:
        spec: The program, its limits and the prelude's tables.
        channel: Its channel to whoever answers its posted calls.
        host_call: Answers the prelude's ``hostCall`` at once, on this thread; never raises.
        strip: Turns a rejected source into JavaScript when it is TypeScript.
        any_effects: Whether a call of a tool that changes things has delivered (else the end
            needs no report of unobserved calls when no call is pending).
        on_output: Given each piece of printed text as it is collected; thread-safe, non-blocking.
        on_wait: Called when the program has handed over what it queued (its text, its calls)
            and goes on: it waits for a call or a timer, or runs on. Not at its end.
        wait_for: Waits in the channel's stead (its ``hands_over``): called with the time
            (time.monotonic) to wait until when the program waits for a call or a timer (and
            with 0 when a timer is due), it takes the posted calls, and returns once results
            are posted, the program is stopped, or by then.
    """

    def __init__(
        self,
        spec: GuestSpec,
        channel: _qjs.Channel,
        host_call: HostCall,
        strip: Strip,
        any_effects: Callable[[], bool],
        on_output: Callable[[str], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        wait_for: Callable[[float], None] | None = None,
    ) -> None:
        # Lone surrogates (non-UTF-8 input) cannot be compiled: they become U+FFFD.
        self.source = _js_text(spec.source)
        self.spec = spec
        self.limits = spec.limits
        self.channel = channel
        self.host_call = host_call
        self.strip = strip
        self.any_effects = any_effects
        self.on_output = on_output
        self.on_wait = on_wait
        self.wait_for = wait_for
        self.cancelled = False
        self._output = PrintedOutput(self.limits.output_bytes_in_memory)
        self._done: tuple[bool, str, str] | None = None
        self._timers: list[tuple[float, int]] = []
        self._live_timers: set[int] = set()
        self._deadline = 0.0
        self._slice_cpu = 0.0  # CPU seconds its first stretch took on the loop's thread
        self._ctx: _qjs.Context | None = None
        self.watch: Watch | None = None  # the watchdog's view of this run, set in run()
        # Printed text held back while the first stretch runs: a stretch that starts over
        # was never seen, so its text must not be streamed.
        self._held: list[str] | None = None
        self._images: list[tuple[str, str]] = []

    @property
    def printed_chars(self) -> int:
        """Characters printed so far, as collected when the program last handed text over (any thread)."""
        return self._output.chars

    # -- the run loop ---------------------------------------------------------------------

    def run(self, ctx: _qjs.Context) -> GuestEnd:
        """Run the program from its start on a fresh context (`prepare_context`). Never raises."""
        cpu_start = time.thread_time()
        self._deadline = time.monotonic() + self.spec.timeout_seconds
        self._ctx = ctx
        error: GuestError | str | None
        try:
            self._enter(ctx, self.limits.cpu_seconds)
            error = self._start(ctx)
            if error is None:
                error = self._loop(ctx, wait=True)
        except BaseException as exc:
            error = _engine_fault(exc)
        return self._end(ctx, error, cpu_start)

    def first_stretch(self, ctx: _qjs.Context) -> GuestEnd | str:
        """Run the program's first stretch here, on the event loop's thread: at most
        `_SLICE_SECONDS`, with no call into Python. Never raises.

        A program that ends within it needs no worker thread (two thread hand-offs, ~0.1 ms of
        a program that calls nothing: bench/bench_engine.py); the loop is held for at most the
        slice (well under the 10 ms no program may block it for).

        Returns:
            How it ended, when it ended within it (done, or failed by its own doing);
            `WAITING` when it waits for a call it posted or a timer (it goes on on a worker,
            `resume`); `START_OVER` when it called into the host (an inline tool, the store),
            ran out of the slice's time or stack, or hit a limit: nothing it did took effect or
            was seen, and it runs again from its start on a worker (`run`, a new program).
        """
        cpu_start = time.thread_time()
        self._deadline = time.monotonic() + self.spec.timeout_seconds
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
            error is not WAITING and isinstance(error, GuestError) and error.kind not in _OWN_ENDINGS
        ):
            self._ctx = None
            return START_OVER
        if self.on_output is not None:
            for text in held:
                self.on_output(text)
        if error is WAITING:
            return WAITING
        return self._end(ctx, error, cpu_start)

    def resume(self, ctx: _qjs.Context) -> GuestEnd:
        """Go on with a program whose first stretch waited (`first_stretch`). Never raises."""
        cpu_start = time.thread_time() - self._slice_cpu
        try:
            self._enter(ctx, self.limits.cpu_seconds - self._slice_cpu)
            error = self._loop(ctx, wait=True)
        except BaseException as exc:
            error = _engine_fault(exc)
        return self._end(ctx, error, cpu_start)

    def cancel(self) -> None:
        """Stop the program as soon as possible, also in the middle of computing (any thread)."""
        self.cancelled = True
        watch = self.watch
        if watch is not None:
            WATCHDOG.cancel(watch)
        self.channel.interrupt()

    def _enter(self, ctx: _qjs.Context, cpu_seconds: float) -> None:
        """Set the program up on this thread: its limits (this thread's stack), its host
        function, and the watchdog's watch (this thread's CPU clock)."""
        ctx.set_limits(self.limits.memory_bytes, self.limits.stack_bytes)
        ctx.set_host(self.host_call)
        self.watch = WATCHDOG.start(self.channel, cpu_seconds, self._deadline)
        if self.cancelled:  # cancelled before the watch existed (see cancel)
            WATCHDOG.cancel(self.watch)

    def _end(self, ctx: _qjs.Context, error: GuestError | str | None, cpu_start: float) -> GuestEnd:
        pending: dict[int, str] = {}
        unobserved: list[int] = []
        try:
            pending, unobserved = self._report(ctx)
        except BaseException as exc:
            error = error or _engine_fault(exc)
        finally:
            self._disarm()
            ctx.set_host(None)  # (the host function refers back to this object)
            self._ctx = None
        assert error is not WAITING
        return GuestEnd(
            output=self._output.text(),
            error=error if isinstance(error, GuestError) else None,
            cpu_seconds=time.thread_time() - cpu_start,
            output_dropped_bytes=self._output.dropped,
            dropped_timers=len(self._live_timers),
            pending=pending,
            unobserved=unobserved,
            images=self._images,
        )

    def _report(self, ctx: _qjs.Context) -> tuple[dict[int, str], list[int]]:
        """The calls still pending at the end (id -> tool name), and the calls of tools that
        change something that settled but were never looked at (the prelude tracks them)."""
        self._disarm()
        if ctx.outstanding == 0 and not self.any_effects():
            return {}, []  # no call pending, none that changed anything: nothing to ask JS
        report = _read_report(ctx)
        if report is None:
            return {}, []
        pending = {int(call_id): str(name) for call_id, name in report["pending"]}
        return pending, [int(call_id) for call_id in report["unobserved"]]

    def _disarm(self) -> None:
        """End the watchdog's hold on the program (idempotent; on the program's thread).

        Called before the output of a stopped program is collected from JS, which must not be
        interrupted again.
        """
        if self.watch is not None:
            WATCHDOG.release(self.watch)
        if self._ctx is not None:
            self._ctx.disarm()

    def _start(self, ctx: _qjs.Context) -> GuestError | None:
        """Compile the program and run it up to its first wait (or its end)."""
        if "\x00" in self.source:  # QuickJS's parser reads U+0000 as the end of the source
            return self._nul_in_source()
        spec = self.spec
        try:
            try:
                ctx.start(
                    self.channel,
                    _PREFIX + self.source + _SUFFIX,
                    self.limits.tool_data_bytes,
                    self.limits.calls_in_flight,
                    spec.effectful_json,
                    spec.namespaces_json,
                    spec.inline_json,
                )
            except _qjs.JSError as exc:
                # Not JavaScript: TypeScript, its types blanked (lines and columns kept), compiles.
                if not str(exc).startswith("SyntaxError"):
                    raise
                stripped = self.strip(self.source)
                if isinstance(stripped, GuestError):
                    return stripped
                if stripped is None:
                    raise
                self.source = stripped
                ctx.start(
                    self.channel,
                    _PREFIX + stripped + _SUFFIX,
                    self.limits.tool_data_bytes,
                    self.limits.calls_in_flight,
                    spec.effectful_json,
                    spec.namespaces_json,
                    spec.inline_json,
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
        ``wait``, `WAITING` where it would wait for a call or a timer."""
        wait_for = self.wait_for if wait else None
        try:
            while True:
                event, drained = ctx.run(self._deadline, self._next_timer(), wait and wait_for is None)
                if event == "drain":
                    assert drained is not None
                    self._drain(ctx, drained)
                    if self._done is not None:
                        return self._finish_error()
                    if self.on_wait is not None:
                        self.on_wait()
                elif event == "wait":
                    if wait_for is None:
                        return WAITING
                    wait_for(min(self._deadline, self._next_timer()))
                elif event == "timer":
                    if wait_for is not None:  # (its calls go now, as they would were it to wait)
                        wait_for(0.0)
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
                    reason = self.watch.reason if self.watch is not None else None
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

    # -- how it ended ------------------------------------------------------------------------

    def _timeout_error(self, waiting: str = "") -> GuestError:
        return GuestError(
            "timeout",
            "Timeout",
            f"the program ran past its {self.spec.timeout_seconds:g} s wall-clock limit{waiting}; "
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
            return CANCELLED
        if reason == "cpu_limit":
            return self._cpu_error(line, col)
        return GuestError(
            "timeout",
            "Timeout",
            f"the program ran past its {self.spec.timeout_seconds:g} s wall-clock limit while computing",
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
            reason = self.watch.reason if self.watch is not None else None
            return self._stopped_error(reason or "cancelled", line, col)
        return GuestError("uncaught", name or "Error", message, line, col, stack)
