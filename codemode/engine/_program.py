"""One Code Mode program on its own thread: a fresh QuickJS context, limits, the JS side of
the bridge, and the wait loop that feeds tool results and timers back in.

Every call into the context happens on the thread that runs `ProgramThread.run`.
The context gets no Python callables: quickjs-ng refuses calls into Python while a time
limit is set, and without callables nothing in the sandbox can reach a Python object.
The program queues messages; this thread drains them whenever the program is idle.
"""

from __future__ import annotations

import collections
import heapq
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

import quickjs

from codemode.engine._native import Native
from codemode.engine._native import load as load_native
from codemode.engine._watchdog import WATCHDOG, Watch
from codemode.errors import ErrorCode, ToolError
from codemode.tools import Tool, ToolContext, ToolRegistry, ToolResult, to_tool_result

# The program is wrapped on its own first line so its line numbers stay the model's own.
_PREFIX = "(async function __cm_main() {"
_SUFFIX = "\n})"
_FRAME = re.compile(r"^\s*at (?P<fn>[^\s(]+)?\s*\(?<input>:(?P<line>\d+):(?P<col>\d+)\)?\s*$")
_FIRST_LOCATION = re.compile(r"<input>:(\d+):(\d+)")
_MODULE_STATEMENT = re.compile(r"^\s*(import|export)\b")
_PRELUDE_SOURCE: str | None = None

_DONE = object()
_APPROVED = object()  # inbox key of a batch of approval decisions
# Without the watchdog's interrupts (see _watchdog.py), between tool calls that settle at once
# the binding's limit is re-armed at most this often.
_RECHECK_SECONDS = 0.001
_MIB = 1024 * 1024


def _prelude() -> str:
    global _PRELUDE_SOURCE
    if _PRELUDE_SOURCE is None:
        _PRELUDE_SOURCE = resources.files("codemode.engine").joinpath("prelude.js").read_text("utf-8")
    return _PRELUDE_SOURCE


_BYTECODE_LOCK = threading.Lock()
_PRELUDE_BYTECODE: tuple[Native | None, bytes | None] | None = None


def _prelude_bytecode() -> tuple[Native | None, bytes | None]:
    """The prelude compiled once per process, and the engine functions that load it (`_native`).

    (None, None) where the engine functions are not available: contexts parse the source.
    """
    global _PRELUDE_BYTECODE
    with _BYTECODE_LOCK:
        if _PRELUDE_BYTECODE is None:
            native = load_native()
            _PRELUDE_BYTECODE = (native, None if native is None else native.compile(_prelude(), "<prelude>"))
        return _PRELUDE_BYTECODE


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
        output_bytes_in_memory: Printed text kept in memory; beyond it the engine stops
            collecting and says so (default 256 MiB).
    """

    memory_bytes: int = 256 * _MIB
    stack_bytes: int = _MIB
    cpu_seconds: float = 30.0
    tool_concurrency: int = 32
    tool_data_bytes: int = 64 * _MIB
    output_bytes_in_memory: int = 256 * _MIB


@dataclass(frozen=True)
class GuestError:
    """How a program failed, as data.

    Attributes:
        kind: ``syntax_error``, ``uncaught``, ``cpu_limit``, ``timeout``,
            ``out_of_memory``, ``stack_overflow``, ``deadlock`` or ``internal``.
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


# How many results of calls nothing looked at a program's report shows (the rest are counted).
_UNAWAITED_KEPT = 100


def as_result(value: Any) -> ToolResult:
    """What a handler returned (a `ToolResult` or plain data) as a result, for reporting."""
    if isinstance(value, ToolResult):
        return value
    try:
        return to_tool_result(value)
    except Exception as exc:  # a value pydantic cannot serialise: still say it finished
        return ToolResult.from_text(f"returned a value that cannot be shown ({type(exc).__name__})")


_CANCELLED = GuestError("cancelled", "Cancelled", "the run was cancelled by the host")


@dataclass
class ProgramOutcome:
    """What running one program produced (before budgeting)."""

    output: str
    error: GuestError | None
    tool_calls: int
    cancelled: list[str]
    cpu_seconds: float
    output_dropped_bytes: int = 0
    dropped_timers: int = 0
    pending_calls: dict[int, str] = field(default_factory=dict)
    late: list[tuple[str, ToolResult]] = field(default_factory=list)
    unawaited: list[tuple[str, ToolResult]] = field(default_factory=list)
    """Calls of tools that declare they change things (destructive) which settled while the
    program ran, but whose result the program never looked at (no await, then or Promise.all):
    what each did."""
    unawaited_more: int = 0
    """How many more such calls there were than `unawaited` lists."""


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, as JavaScript's JSON.stringify does."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _js_text(text: str) -> str:
    """``text`` as the QuickJS binding can take it: lone surrogates become U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with lone surrogates in its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


# The C scanner behind json.loads, called directly: it skips loads' two Python frames and
# its whitespace regex (JSON the prelude made has none around it): 0.4 instead of 1.3 us per
# tool call's message, ~6% of an inline call (bench/bench_engine.py). Anything it does not
# take whole goes through json.loads, for its error.
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _from_js_json(raw: str) -> Any:
    """JSON text the prelude made, decoded. JSON.stringify escapes a lone surrogate, which
    Python text cannot hold: such strings get U+FFFD instead.

    Raises:
        json.JSONDecodeError: ``raw`` is not one JSON value.
    """
    try:
        value, end = _SCAN(raw, 0)
    except StopIteration:
        end = -1
    if end != len(raw):
        value = json.loads(raw)
    return _without_lone_surrogates(value) if "\\ud" in raw else value


def _to_json(value: Any) -> str | None:
    """Strict JSON text of ``value`` (non-finite numbers become null); None when it is not JSON."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return repr(value) if math.isfinite(value) else "null"
    try:
        return _js_text(_ENCODE(value))
    except ValueError:
        try:
            return _js_text(json.dumps(_finite(value), ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return None
    except (TypeError, RecursionError):
        return None


def _size_text(size: int) -> str:
    """``size`` (bytes, or characters of JSON text) for a message: ``12 bytes``, ``1.5 MiB``.

    The prelude's ``__cm_size_text`` says the same.
    """
    if size < _MIB // 10:
        return f"{size} bytes"
    tenths = round(size * 10 / _MIB)
    return f"{tenths // 10} MiB" if tenths % 10 == 0 else f"{tenths / 10:.1f} MiB"


def map_location(line: int, col: int) -> tuple[int, int]:
    """Map a position in the wrapped source back to the model's source."""
    if line == 1:
        col = max(1, col - len(_PREFIX))
    return line, col


def map_stack(stack: str) -> tuple[str, int | None, int | None]:
    """Rewrite a QuickJS stack to the model's lines, dropping prelude frames.

    Returns:
        ``(stack_text, line, column)`` where line/column locate the innermost program frame.
    """
    frames: list[str] = []
    first: tuple[int, int] | None = None
    for raw in stack.splitlines():
        m = _FRAME.match(raw)
        if m is None:
            continue
        fn = m.group("fn") or "<anonymous>"
        if fn.startswith("__cm_") and fn != "__cm_main":
            continue
        line, col = map_location(int(m.group("line")), int(m.group("col")))
        if first is None:
            first = (line, col)
        name = "<program>" if fn in ("__cm_main", "<eval>") else fn
        frames.append(f"    at {name} (line {line}:{col})")
    if len(frames) > 12:
        frames = [*frames[:6], f"    ... {len(frames) - 12} more frames ...", *frames[-6:]]
    return "\n".join(frames), (first[0] if first else None), (first[1] if first else None)


_ENTRY_POINTS = (
    "__cm_start",
    "__cm_settle",
    "__cm_fire",
    "__cm_drain",
    "__cm_take_output",
    "__cm_take_chunk",
    "__cm_unobserved",
)


class _HostCall:
    """The context's one host function (the prelude's ``hostCall``): passes each call to the
    program running on the context. It must never raise: an exception escaping a callable
    leaves the binding in an error state."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.target: Callable[[str, int, str, str, int], str] | None = None

    def __call__(self, kind: str, call_id: int, name_json: str, payload_json: str, size: int) -> str:
        target = self.target
        if target is None:  # pragma: no cover - the prelude only calls it while a program runs
            return 'e{"code":"tool_failed","message":"no program is running","data":null}'
        return target(kind, call_id, name_json, payload_json, size)


@dataclass(frozen=True)
class PreparedContext:
    """A fresh QuickJS context with the prelude loaded and its host entry points."""

    ctx: quickjs.Context
    host_call: _HostCall
    start: Any
    settle: Any
    fire: Any
    drain: Any
    take_output: Any
    take_chunk: Any
    unobserved: Any

    @classmethod
    def create(cls) -> PreparedContext:
        """Make one (on the thread that will run the program)."""
        ctx = quickjs.Context()
        host_call = _HostCall()
        ctx.add_callable("__cm_host_call", host_call)  # the prelude takes it and deletes it
        native, code = _prelude_bytecode()
        loaded = native is not None and code is not None and native.run(ctx, code)
        if not loaded:
            if code is not None:  # the failed load spoilt this context: start again from the source
                ctx = quickjs.Context()
                ctx.add_callable("__cm_host_call", host_call)
            ctx.eval(_prelude())
        parts = [ctx.get(name) for name in _ENTRY_POINTS]
        ctx.eval("".join(f"delete globalThis.{name};" for name in _ENTRY_POINTS))
        return cls(ctx, host_call, *parts)


class _Inbox:
    """Completions from the event loop to the JS thread (many producers, one consumer)."""

    def __init__(self) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._signal = threading.Lock()
        self._signal.acquire()

    def put(self, item: Any) -> None:
        self._items.append(item)
        try:
            self._signal.release()
        except RuntimeError:  # already signalled
            pass

    def drain(self) -> list[Any]:
        """Whatever is queued now, without waiting (what arrived after the program stopped reading)."""
        items = []
        while self._items:
            items.append(self._items.popleft())
        return items

    def take(self, timeout: float | None) -> list[Any]:
        """All items available now, waiting up to ``timeout`` seconds (None: forever) for one."""
        if not self._items:
            self._signal.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        else:
            self._signal.acquire(blocking=False)
        items = []
        while self._items:
            items.append(self._items.popleft())
        return items


class ToolDispatcher:
    """How the JS thread starts tool calls on the event loop (provided by the runtime)."""

    def start(self, call_id: int, tool: Tool, args: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def approve(self, batch: int, requests: list[Any]) -> None:  # pragma: no cover - interface
        """Ask the gate about ``requests`` on the loop; put ``(_APPROVED, (batch, decisions))``
        in the inbox when it answers."""
        raise NotImplementedError


class CallGate(Protocol):
    """What a call must pass before it runs (the host's approvals, ``codemode.policy``).

    ``requests`` is asked on the program's thread for each call as the program makes it;
    calls needing a decision are held, and all those of one drain of the program's queue
    (calls started together, as with ``Promise.all``) go to ``decide`` as one batch.
    """

    def requests(self, tool: Tool, arguments: Mapping[str, Any], session_id: str) -> Sequence[Any] | str:
        """What this call needs decided (empty: it runs), or why it is refused outright."""
        ...

    async def decide(self, requests: list[Any]) -> Sequence[Any]:
        """One decision per request, in order."""
        ...

    def refusal(self, requests: Sequence[Any], decisions: Sequence[Any]) -> str | None:
        """The message for a call one of whose requests was denied, or None."""
        ...


@dataclass
class ProgramThread:
    """Runs one program; `run` is called on a worker thread and returns its outcome."""

    source: str
    registry: ToolRegistry
    context: ToolContext
    limits: EngineLimits
    timeout_seconds: float
    dispatcher: ToolDispatcher
    inbox: _Inbox = field(default_factory=_Inbox)
    cancelled: threading.Event = field(default_factory=threading.Event)
    gate: CallGate | None = None

    def __post_init__(self) -> None:
        # Lone surrogates (non-UTF-8 input) cannot cross into QuickJS: they become U+FFFD.
        self.source = _js_text(self.source)
        self._reply = ""  # what a call answered at once (see _call_now)
        self._settled_in_drain = False  # a promise was settled while draining: run jobs first
        self._take_output: Any = None  # the context's functions, set in _run
        self._take_chunk: Any = None
        self._settle: Any = None
        self._output: list[str] = []
        self._output_bytes = 0
        self._output_dropped = 0
        self._done: tuple[bool, str, str] | None = None
        self._pending: dict[int, tuple[str, int]] = {}  # call id -> (tool name, argument size)
        self._args_held = 0  # characters of JSON arguments of the calls in _pending
        self._timers: list[tuple[float, int]] = []
        self._live_timers: set[int] = set()
        self._tool_calls = 0
        # Calls waiting for approval: those of this drain, then by batch until decided.
        self._to_ask: list[tuple[int, Tool, Any, Sequence[Any]]] = []
        self._asked: dict[int, list[tuple[int, Tool, Any, Sequence[Any]]]] = {}
        # Calls of tools that change something: started, delivered, and the first results
        # (for the report of calls the program never looked at, see _unawaited).
        self._effect_calls: set[int] = set()
        self._effect_delivered: set[int] = set()
        self._effect_results: dict[int, tuple[str, Any]] = {}
        self._running = 0  # calls handed to the loop and not finished
        self._waiting: collections.deque[tuple[int, Tool, Any]] = collections.deque()
        self._deadline = 0.0
        self._cpu_start = 0.0
        self._ctx: quickjs.Context | None = None
        self._watch: Watch | None = None  # the watchdog's view of this run, set in run()
        self._armed_for_wall = False
        self._armed_at = -math.inf  # time.monotonic() of the last arming
        self._cpu_checked_at = -math.inf

    @property
    def printed_chars(self) -> int:
        """Characters the program has printed so far, as collected at its last yield to the
        host (a tool call, a timer, its end); read from any thread, for progress reports."""
        return self._output_bytes + self._output_dropped

    @property
    def tool_calls(self) -> int:
        """Tool calls the program has started so far (read from any thread)."""
        return self._tool_calls

    # -- the run loop ---------------------------------------------------------------------

    def run(self, warm: PreparedContext) -> ProgramOutcome:
        """Run the program on a fresh prepared context. Never raises.

        Returns on completion, failure, deadlock or a limit.
        """
        self._cpu_start = time.thread_time()
        self._deadline = time.monotonic() + self.timeout_seconds
        ctx = self._ctx = warm.ctx
        ctx.set_memory_limit(self.limits.memory_bytes)
        ctx.set_max_stack_size(self.limits.stack_bytes)
        try:
            self._watch = WATCHDOG.start(ctx, self.limits.cpu_seconds, self._deadline)
            if self.cancelled.is_set():  # cancelled before the watch existed (see cancel)
                WATCHDOG.cancel(self._watch)
            error = self._run(warm)
            unawaited, unawaited_more = self._unawaited(warm)
        except BaseException as exc:
            error = GuestError("internal", type(exc).__name__, f"engine fault: {exc}")
            unawaited, unawaited_more = [], 0
        finally:
            self._disarm()
            # Drop our references to the context's functions here, so the runtime is freed
            # on this thread (with the worker's) and not later on the event loop's.
            self._take_output = self._take_chunk = self._settle = self._ctx = None
        return ProgramOutcome(
            output="".join(self._output),
            error=error,
            tool_calls=self._tool_calls,
            cancelled=[name for name, _ in self._pending.values()],
            pending_calls={call_id: name for call_id, (name, _) in self._pending.items()},
            cpu_seconds=time.thread_time() - self._cpu_start,
            output_dropped_bytes=self._output_dropped,
            dropped_timers=len(self._live_timers),
            unawaited=unawaited,
            unawaited_more=unawaited_more,
        )

    def _unawaited(self, warm: PreparedContext) -> tuple[list[tuple[str, ToolResult]], int]:
        """The calls of tools that change something which settled but were never looked at
        (the prelude tracks their promises), with what each returned; and how many more
        there were than this keeps."""
        if not self._effect_results:
            return [], 0
        self._disarm()
        try:
            ids = json.loads(warm.unobserved())
        except (quickjs.JSException, TypeError, ValueError):  # the heap is full: nothing to say
            return [], 0
        kept = [self._effect_results[i] for i in ids if i in self._effect_results]
        more = sum(1 for i in ids if i in self._effect_delivered and i not in self._effect_results)
        return [(name, as_result(value)) for name, value in kept], more

    def cancel(self) -> None:
        """Stop the program as soon as possible, also in the middle of computing (any thread)."""
        self.cancelled.set()
        watch = self._watch
        if watch is not None:
            WATCHDOG.cancel(watch)
        self.inbox.put((_DONE, None))

    def _disarm(self) -> None:
        """End the watchdog's hold on the context (idempotent; on the program's thread).

        Called before the output of a stopped program is collected from JS, which must not be
        interrupted again.
        """
        if self._watch is not None and self._ctx is not None:
            WATCHDOG.release(self._watch, self._ctx)

    def _arm(self, ctx: quickjs.Context) -> None:
        """Without the watchdog's interrupts: give the next entries into JS whatever CPU and
        wall time is left, as the binding's own limit.

        The binding measures the limit with clock(), the CPU time of the whole process, so
        an interrupt can come early when other threads are busy (and, as a wall-clock limit,
        late on a loaded machine); which limit was armed (not the clocks read afterwards)
        therefore says which one the interrupt stands for.

        Re-arming (two clocks and a new limit in the binding) costs several µs, a fifth of
        a cheap tool call, so within `_RECHECK_SECONDS` of wall time of the last arming it is
        skipped: every entry still gets at most what was left then, and the first one after
        that window is armed with what is left now.
        """
        if self._watch is None or self._watch.interrupts:
            return  # the watchdog keeps both limits
        now = time.monotonic()
        if now - self._armed_at < _RECHECK_SECONDS:
            return
        self._armed_at = now
        cpu_left = self.limits.cpu_seconds - (time.thread_time() - self._cpu_start)
        wall_left = self._deadline - now
        self._armed_for_wall = wall_left <= cpu_left
        ctx.set_time_limit(max(0.001, min(cpu_left, wall_left)))

    def _run(self, warm: PreparedContext) -> GuestError | None:
        ctx = warm.ctx
        start, settle, fire, drain = warm.start, warm.settle, warm.fire, warm.drain
        warm.host_call.target = self._call_now
        self._take_output, self._take_chunk, self._settle = warm.take_output, warm.take_chunk, settle
        if "\x00" in self.source:  # the binding refuses such source with a bare ValueError
            return self._nul_in_source()
        # Armed before the eval: a program that closes the wrapper ("}); while (true) {} ...")
        # runs code right here, and must meet the same CPU and wall-clock limits.
        self._arm(ctx)
        try:
            main = ctx.eval(_PREFIX + self.source + _SUFFIX)
        except quickjs.JSException as exc:
            text = str(exc)
            if text.startswith("SyntaxError"):
                return self._syntax_error(text)
            self._salvage_output()
            return self._limit_error(text, None)
        try:
            # One arm per cycle (start, then each wake-up) covers every entry into JS until
            # the next wait: each call gets at most what was left when armed.
            self._arm(ctx)
            start(
                main,
                self.limits.tool_data_bytes,
                self.registry.effectful_names_json(),
                self.registry.namespaces_json(),
                self._watch is not None and self._watch.interrupts,  # no binding time limit
            )
            while True:
                stopped = self._run_jobs(ctx)
                if stopped is not None:
                    self._salvage_output()
                    return stopped
                self._drain(drain)
                if self._done is not None:
                    return self._finish_error()
                if self._settled_in_drain:
                    self._settled_in_drain = False
                    stopped = self._check_limits()
                    if stopped is not None:
                        return stopped
                    self._arm(ctx)
                    continue
                if self.cancelled.is_set():
                    return _CANCELLED
                if not self._pending and not self._live_timers:
                    return GuestError(
                        "deadlock",
                        "Deadlock",
                        "the program is awaiting a promise that nothing can settle (no tool call "
                        "or timer is pending); every promise must be resolved by a tool call, a "
                        "timer, or your own code",
                    )
                if not self._wait_and_deliver(ctx, settle, fire):
                    names_waiting = sorted({name for name, _ in self._pending.values()})
                    waiting = f" while waiting for {', '.join(names_waiting)}" if names_waiting else ""
                    return self._timeout_error(waiting)
        except quickjs.StackOverflow as exc:
            self._salvage_output()
            return self._limit_error(str(exc), "stack_overflow")
        except quickjs.JSException as exc:
            self._salvage_output()
            return self._limit_error(str(exc), None)

    def _run_jobs(self, ctx: quickjs.Context) -> GuestError | None:
        """Run pending jobs until none is left, re-checking the limits as it goes.

        Each call into QuickJS restarts its time limit, so a program that only chains
        promises (``while (true) await null``) would never trip it: check every few hundred
        jobs and re-arm.
        """
        count = 0
        while ctx.execute_pending_job():
            count += 1
            if count % 256 == 0:
                stopped = self._check_limits()
                if stopped is not None:
                    return stopped
                self._arm(ctx)
        return None

    def _check_limits(self) -> GuestError | None:
        """The error for a limit already passed (cancel, wall clock, CPU), or None."""
        if self.cancelled.is_set():
            return _CANCELLED
        watch = self._watch
        assert watch is not None
        if watch.reason is not None:  # the watchdog stopped the program
            return self._stopped_error(watch.reason, None, None)
        now = time.monotonic()
        if now >= self._deadline:
            return self._timeout_error()
        if watch.interrupts or now - self._cpu_checked_at < _RECHECK_SECONDS:
            return None
        self._cpu_checked_at = now
        if time.thread_time() - self._cpu_start >= self.limits.cpu_seconds:
            return self._cpu_error()
        return None

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

    def _drain(self, drain: Any) -> None:
        """Handle everything the program queued since the last drain (prints, calls, ...)."""
        raw = drain()
        if not raw:
            if self._to_ask:  # calls made through hostCall that wait for approval
                self._ask_held()
            return
        print_bytes, print_json, messages = _from_js_json(raw)
        if print_bytes:
            text = self._take_output()
            self._append_output(json.loads(text) if print_json else text)

        for message in messages:
            kind = message[0]
            if kind == "call" or kind == "sync":  # queued: the binding refused direct calls
                self._handle_call(self._settle_now, message)
            elif kind == "timer":
                self._live_timers.add(message[1])
                heapq.heappush(self._timers, (time.monotonic() + message[2] / 1000.0, message[1]))
            elif kind == "untimer":
                self._live_timers.discard(message[1])
            elif kind == "done":
                self._done = (bool(message[1]), str(message[2]), str(message[3]))
        if self._to_ask:
            self._ask_held()

    def _ask_held(self) -> None:
        """Send the calls of this drain that need approval to the gate, as one batch."""
        batch, self._to_ask = self._to_ask, []
        batch_id = len(self._asked) + 1
        self._asked[batch_id] = batch
        self.dispatcher.approve(batch_id, [request for *_, needs in batch for request in needs])

    def _resume_asked(self, settle: Any, batch_id: int, decisions: Sequence[Any]) -> None:
        """Run the calls of a decided batch that were allowed; reject the others (``denied``)."""
        assert self.gate is not None
        at = 0
        for call_id, tool, args, needs in self._asked.pop(batch_id, []):
            mine = decisions[at : at + len(needs)]
            at += len(needs)
            if call_id not in self._pending:
                continue
            refusal = self.gate.refusal(needs, mine)
            if refusal is None:
                self._run_call(settle, call_id, tool, args, self._pending[call_id][1], held=True)
                continue
            _, size = self._pending.pop(call_id)
            self._args_held -= size
            self._reject(settle, call_id, f"{tool.name}: {refusal}", {"error": "denied"}, ErrorCode.DENIED)

    def _call_now(self, kind: str, call_id: int, name_json: str, payload_json: str, size: int) -> str:
        """The prelude's ``hostCall``: start one call, from inside JS; never raises.

        The message's parts, as a queued one holds them (`_handle_call`): ``name_json`` and
        ``payload_json`` are JSON text.

        Returns:
            Its result when it settled at once (an inline tool, a refusal, ``store.*``), as
            "t"/"j"/"e" and the text, JSON or error JSON; else "" (it settles later).
        """
        self._reply = ""
        try:
            message = [kind, call_id, _from_js_json(name_json), _from_js_json(payload_json), size]
            self._handle_call(self._answer, message)
        except Exception as exc:  # a host fault must not reach the binding (see _HostCall)
            fault = {"code": ErrorCode.TOOL_FAILED.value, "message": f"engine fault: {exc!r}", "data": None}
            self._answer(0, False, _to_json(fault) or "", False)
        return self._reply

    def _handle_call(self, settle: Any, message: list[Any]) -> None:
        """A ``call`` or ``sync`` message, however it came (`_call_now` or `_drain`):
        ``[kind, id, name, payload, size]``, a sync operation's payload ``[a, b]``."""
        if message[0] == "call":
            self._start_call(settle, message[1], message[2], message[3], message[4])
        else:
            a, b = message[3]
            self._sync(settle, message[1], message[2], a, b)

    def _settle_now(self, *args: Any) -> None:
        # Calls queued in the drain that settle at once: the run loop must run the jobs this
        # creates before it waits for anything else.
        self._settled_in_drain = True
        self._settle(*args)

    def _answer(self, call_id: int, ok: bool, payload: str, is_text: bool) -> None:
        """The settle function of calls that settle inside `_call_now`."""
        self._reply = ("t" if is_text else "j") + payload if ok else "e" + payload

    def _append_output(self, text: str) -> None:
        size = len(text)
        if self._output_bytes + size > self.limits.output_bytes_in_memory:
            self._output_dropped += size
            return
        self._output_bytes += size
        self._output.append(text)

    def _salvage_output(self) -> None:
        """Collect printed text after a limit error, piece by piece (the heap may be full)."""
        self._disarm()
        try:
            while (chunk := self._take_chunk()) is not None:
                self._append_output(json.loads(chunk))
        except (quickjs.JSException, TypeError, ValueError):  # a value the binding cannot convert
            pass

    def _start_call(self, settle: Any, call_id: int, name: str, args: Any, size: int) -> None:
        """Start one call; ``size`` is its arguments' JSON length (the prelude admitted it
        within the tool-data limit, counting every call it has not seen settled)."""
        tool = self.registry.get(name)
        if tool is None:
            self._reject(
                settle, call_id, self.registry.unknown_tool_message(name), None, ErrorCode.UNKNOWN_TOOL
            )
            return
        raw = args
        try:
            args = tool.parse(args)  # the one check; the handler gets the parsed model
        except ToolError as exc:
            self._reject(settle, call_id, exc.message, exc.data, exc.code)
            return
        self._tool_calls += 1
        if self.gate is not None:
            needs = self.gate.requests(tool, raw, self.context.session_id)
            if isinstance(needs, str):
                self._reject(settle, call_id, f"{tool.name}: {needs}", None, ErrorCode.DENIED)
                return
            if needs:  # held; asked with the others of this drain (_ask_held)
                self._pending[call_id] = (tool.name, size)
                self._args_held += size
                self._to_ask.append((call_id, tool, args, needs))
                return
        self._run_call(settle, call_id, tool, args, size)

    def _run_call(
        self, settle: Any, call_id: int, tool: Tool, args: Any, size: int, held: bool = False
    ) -> None:
        """Run an admitted call: inline here, else on the event loop (``held``: it was waiting
        for approval, already counted as pending)."""
        if tool.destructive is True:  # what the prelude tracks (effectful_names_json)
            self._effect_calls.add(call_id)
        if tool.inline:
            if held:
                self._pending.pop(call_id, None)
                self._args_held -= size
            try:
                value = self.registry.invoke_inline(tool, args, self.context)
            except Exception as exc:  # a UserError from the handler: still only this call fails
                value = ToolResult.failure(ErrorCode.HANDLER_FAILED, f"{tool.name} failed: {exc}")
            self._deliver(settle, call_id, value, tool.name)
            return
        if not held:
            self._pending[call_id] = (tool.name, size)
            self._args_held += size
        if self._running < self.limits.tool_concurrency:
            self._running += 1
            self.dispatcher.start(call_id, tool, args)
        else:
            self._waiting.append((call_id, tool, args))

    @staticmethod
    def _reject(
        settle: Any, call_id: int, message: str, data: Any, code: ErrorCode = ErrorCode.TOOL_FAILED
    ) -> None:
        payload = _to_json({"code": code.value, "message": message, "data": data}) or _to_json(
            {"code": code.value, "message": message, "data": None}
        )
        settle(call_id, False, payload, False)

    def _sync(self, settle: Any, call_id: int, op: str, a: Any, b: Any) -> None:
        try:
            value = self._sync_op(op, a, b)
        except ToolError as exc:
            self._reject(settle, call_id, exc.message, exc.data, exc.code)
            return
        except Exception as exc:  # a host fault in the store must not kill the program thread
            self._reject(settle, call_id, f"{op} failed: {type(exc).__name__}: {exc}", None)
            return
        payload = _to_json(value)
        if payload is None:
            self._reject(settle, call_id, f"{op} returned a value that is not JSON", None)
            return
        settle(call_id, True, payload, False)

    def _sync_op(self, op: str, a: Any, b: Any) -> Any:
        if op == "searchTools":
            limit = int(b) if isinstance(b, int | float) and b > 0 else 10
            return self.registry.search(str(a), limit=limit)
        if op == "describeTool":
            return self.registry.describe(str(a))
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
        raise ToolError(f"unknown operation {op}")

    def _wait_and_deliver(self, ctx: quickjs.Context, settle: Any, fire: Any) -> bool:
        """Wait for tool results or timers and hand them to JS. False once the deadline passed."""
        now = time.monotonic()
        if now >= self._deadline:
            return False
        timeout = self._deadline - now
        while self._timers and self._timers[0][1] not in self._live_timers:
            heapq.heappop(self._timers)
        if self._timers:
            timeout = min(timeout, max(0.0, self._timers[0][0] - now))
        items = self.inbox.take(timeout)
        self._arm(ctx)
        for call_id, result in items:
            if call_id is _DONE:
                continue
            if call_id is _APPROVED:
                self._resume_asked(settle, *result)
                continue
            self._running -= 1
            if self._waiting:
                self._running += 1
                self.dispatcher.start(*self._waiting.popleft())
            entry = self._pending.pop(call_id, None)
            if entry is None:
                continue
            tool_name, size = entry
            self._args_held -= size
            self._deliver(settle, call_id, result, tool_name)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, tid = heapq.heappop(self._timers)
            if tid in self._live_timers:
                self._live_timers.discard(tid)
                fire(tid)
        return True

    def _deliver(self, settle: Any, call_id: int, value: Any, tool_name: str) -> None:
        """Settle a call with what its handler returned (a `ToolResult` or plain data)."""
        if call_id in self._effect_calls:  # kept in case the program never looks at it
            self._effect_calls.discard(call_id)
            self._effect_delivered.add(call_id)
            if len(self._effect_results) < _UNAWAITED_KEPT:
                self._effect_results[call_id] = (tool_name, value)
        kind = type(value)
        if kind is str:
            self._hand_over(settle, call_id, True, _js_text(value), True, tool_name)
            return
        if value is None:
            settle(call_id, True, "", True)
            return
        if kind is int or kind is float or kind is bool:
            settle(call_id, True, _to_json(value), False)
            return
        if kind is ToolResult:
            result: ToolResult = value
        else:
            try:
                result = to_tool_result(value)
            except Exception as exc:  # a value pydantic cannot serialise
                result = ToolResult.failure(
                    ErrorCode.RESULT_NOT_JSON,
                    f"{tool_name} failed: its result cannot be turned into JSON: {type(exc).__name__}: {exc}",
                )
        # Rejection only when the call failed. A result the tool marks is_error without a
        # failure (bash: a command that ran and exited non-zero) is data the program computes on.
        failure = result.error
        if failure is not None:
            data = failure.data
            if _to_json(data) is None:
                data = None  # the message still says what failed
            payload = _to_json({"code": failure.code.value, "message": failure.message, "data": data})
            self._hand_over(settle, call_id, False, payload, False, tool_name)
            return
        data = result.producer_data()
        if isinstance(data, str):
            self._hand_over(settle, call_id, True, _js_text(data), True, tool_name)
            return
        payload = _to_json(data)
        if payload is None:
            message = (
                f"{tool_name} returned structured data that is not JSON "
                f"({type(data).__name__} holding values JSON cannot carry); its text was: {result.text[:200]}"
            )
            self._reject(settle, call_id, message, None, ErrorCode.RESULT_NOT_JSON)
            return
        self._hand_over(settle, call_id, True, payload, False, tool_name)

    def _hand_over(
        self, settle: Any, call_id: int, ok: bool, payload: Any, is_text: bool, tool_name: str
    ) -> None:
        """Settle a call with its result's JSON text, unless that would take the tool-call data
        the host holds for this program (with the arguments of the calls in flight) over the limit."""
        size = len(payload)
        if size + self._args_held <= self.limits.tool_data_bytes:
            settle(call_id, ok, payload, is_text)
            return
        limit = self.limits.tool_data_bytes
        held = f" while the calls in flight hold {_size_text(self._args_held)}" if self._args_held else ""
        message = (
            f"{tool_name} returned {_size_text(size)} of data{held}, more than the {_size_text(limit)} of "
            "tool-call data the host holds for one program; ask for less per call (a page, a range, "
            "a filter)" + (", or await calls one at a time" if self._args_held else "")
        )
        data = {
            "error": "tool_data_limit",
            "limit_bytes": limit,
            "result_bytes": size,
            "held_bytes": self._args_held,
        }
        self._reject(settle, call_id, message, data, ErrorCode.TOOL_DATA_LIMIT)

    def _finish_error(self) -> GuestError | None:
        assert self._done is not None
        ok, value, error_json = self._done
        if ok:
            if error_json == "value" and value:
                self._append_output(value if value.endswith("\n") else value + "\n")
            return None
        info = json.loads(error_json)
        stack, line, col = map_stack(info.get("stack", ""))
        name = info.get("name", "Error")
        message = info.get("message", "")
        if name == "InternalError" and message in ("out of memory", "interrupted"):
            return self._limit_error(f"{name}: {message}\n{info.get('stack', '')}", None)
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

    def _limit_error(self, text: str, kind: str | None) -> GuestError:
        first_line = text.splitlines()[0] if text else "InternalError"
        name, _, message = first_line.partition(": ")
        stack, line, col = map_stack(text)
        if kind == "stack_overflow" or "call stack" in message:
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
            if reason is None:  # the binding's own limit (see _arm) fired
                wall = self._armed_for_wall or time.monotonic() >= self._deadline - 0.01
                reason = "timeout" if wall else "cpu_limit"
            return self._stopped_error(reason, line, col)
        return GuestError("uncaught", name or "Error", message, line, col, stack)
