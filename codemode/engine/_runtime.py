"""The async side of the engine: runs a program on a JS thread and its tool calls on the event loop.

A program posts its tool calls to its ``_qjs.Channel``; the channel's eventfd wakes the loop,
where `_Calls` checks each call once, asks the gate, runs it in the spawner's runner tasks, and
posts its result's JSON back to the program, which settles the call on its own thread without
the GIL.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import anyio.lowlevel
import anyio.to_thread

from codemode.engine import _qjs
from codemode.engine._bridge import _from_js_json, failure_json, parse_call, prepare_context, result_payload
from codemode.engine._loop import LoopSpawner
from codemode.engine._outcome import CallGate, EngineLimits, ProgramCalls, ProgramOutcome, as_result
from codemode.engine._program import START_OVER, WAITING, ProgramThread
from codemode.engine._workers import WorkerPool
from codemode.errors import ErrorCode, ToolError
from codemode.tools import Tool, ToolContext, ToolFailure, ToolRegistry, ToolResult, failure_of

# A call admitted to run: its id, tool, parsed arguments.
_Admitted = tuple[int, Tool, Any]


class _Calls:
    """The event loop's side of one program's tool calls.

    Takes what the program posts (`on_posted`, the channel's reader), checks each call once,
    asks the gate, runs it (at most ``tool_concurrency`` at once) and posts its result. Lives on
    the loop's thread.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        context: ToolContext,
        limits: EngineLimits,
        gate: CallGate | None,
        channel: _qjs.Channel,
        spawner: LoopSpawner,
        shared: ProgramCalls,
    ) -> None:
        self.registry = registry
        self.context = context
        self.limits = limits
        self.gate = gate
        self.channel = channel
        self.spawner = spawner
        self.shared = shared
        self._pending: dict[int, tuple[str, int]] = {}  # posted and not answered: tool name, argument size
        self._running = 0
        self._waiting: collections.deque[_Admitted] = collections.deque()
        self._starting = False  # _ran is starting waiting calls (a call it starts may end at once)
        # What the posted results were, as the handlers returned them, until the program has
        # read them (in the order posted: `channel.unread` says how many are left). What is
        # left when it ends is reported as what those calls did (`Engine._settle_pending`).
        self.unread: collections.OrderedDict[int, tuple[str, Any]] = collections.OrderedDict()

    def on_posted(self) -> None:
        """The program posted calls: check and start each (the channel's reader callback).

        The gate is asked here, on the loop, when that is a permission lookup (the common case).
        A call for which it runs the command policy (``approve_commands``: a bash run's script,
        which may be a file a command wrote) is asked about in one worker-thread hop with the
        others of this take. Calls needing a decision are held, and those of one take go to
        ``decide`` as one batch.
        """
        gate = self.gate
        asked: list[tuple[_Admitted, Sequence[Any]]] = []
        checked: list[tuple[_Admitted, Any]] = []  # calls whose check reads files: off the loop
        for call_id, name, payload_json, size in self.channel.take_calls():
            try:
                arguments = _from_js_json(payload_json)
            except ValueError as exc:  # pragma: no cover - the prelude posts JSON it made
                self._reject(call_id, failure_of(exc, name))
                continue
            self._pending[call_id] = (name, size)
            self.shared.args_held += size
            try:
                tool, args = parse_call(self.registry, name, arguments)
            except ToolError as exc:
                self._reject(call_id, failure_of(exc, name, prefix=False))
                continue
            self.shared.loop_calls += 1
            if gate is not None and gate.reads_files(tool, arguments):
                checked.append(((call_id, tool, args), arguments))
                continue
            need = gate.requests(tool, arguments, self.context.session_id) if gate is not None else ()
            self._admit((call_id, tool, args), need, asked)
        if checked:
            self.spawner.spawn(lambda: self._check_then_decide(checked, asked), lambda: None)
        elif asked:
            self.spawner.spawn(lambda: self._decide(asked), lambda: None)

    def _admit(
        self, call: _Admitted, need: Sequence[Any] | str, asked: list[tuple[_Admitted, Sequence[Any]]]
    ) -> None:
        """Act on the gate's answer about a call: refuse it, hold it for a decision, or run it."""
        call_id, tool, args = call
        if isinstance(need, str):
            self._reject(call_id, ToolFailure(code=ErrorCode.DENIED, message=f"{tool.name}: {need}"))
        elif need:
            asked.append((call, need))
        else:
            self._run(call_id, tool, args)

    async def _check_then_decide(
        self, checked: list[tuple[_Admitted, Any]], asked: list[tuple[_Admitted, Sequence[Any]]]
    ) -> None:
        """Ask the gate about calls whose check reads files, in one worker-thread hop, then
        decide about them with the take's other held calls, as one batch."""
        gate = self.gate
        assert gate is not None
        session_id = self.context.session_id
        needs = await anyio.to_thread.run_sync(
            lambda: [gate.requests(call[1], arguments, session_id) for call, arguments in checked]
        )
        for (call, _), need in zip(checked, needs, strict=True):
            self._admit(call, need, asked)
        if asked:
            await self._decide(asked)

    async def _decide(self, asked: list[tuple[_Admitted, Sequence[Any]]]) -> None:
        """Have the gate decide about held calls, as one batch; run the allowed, reject the rest."""
        gate = self.gate
        assert gate is not None
        decisions = await gate.decide([request for _, need in asked for request in need])
        at = 0
        for (call_id, tool, args), need in asked:
            mine = decisions[at : at + len(need)]
            at += len(need)
            refusal = gate.refusal(need, mine)
            if refusal is None:
                self._run(call_id, tool, args)
            else:
                self._reject(call_id, ToolFailure(code=ErrorCode.DENIED, message=f"{tool.name}: {refusal}"))

    def _run(self, call_id: int, tool: Tool, args: Any) -> None:
        # An inline tool gets here when its call needed a decision, or when decisions are
        # batched (every call comes to the loop): it is cheap, it runs here.
        if tool.inline:
            try:
                value = self.registry.invoke_inline(tool, args, self.context)
            except Exception as exc:  # a UserError from the handler: still only this call fails
                value = ToolResult.failed(failure_of(exc, tool.name))
            self._deliver(call_id, tool, value)
            return
        if self._running >= self.limits.tool_concurrency:
            self._waiting.append((call_id, tool, args))
            return
        self._running += 1

        async def job() -> None:
            try:
                value = await self.registry.invoke_raw(tool, args, self.context)
            except Exception as exc:  # invoke_raw maps handler errors; this is a last resort
                value = ToolResult.failed(failure_of(exc, tool.name))
            finally:
                self._ran()  # (stopped when the program ended: it stays pending, reported as cancelled)
            self._deliver(call_id, tool, value)

        self.spawner.run_now(job, self._ran)  # refused: the program has ended (reported as cancelled)

    def _ran(self) -> None:
        """A running call finished (or was refused): start the next ones waiting.

        A call started here may end (or be refused, once the program has ended) before
        `_run` returns, calling this again: that inner call only counts it, and the loop below
        goes on. Started one inside the other, 10,000 waiting calls refused at the end of a
        program recursed 10,000 frames deep (RecursionError in the host).
        """
        self._running -= 1
        if self._starting:
            return
        self._starting = True
        try:
            while self._waiting and self._running < self.limits.tool_concurrency:
                self._run(*self._waiting.popleft())
        finally:
            self._starting = False

    def _deliver(self, call_id: int, tool: Tool, value: Any) -> None:
        entry = self._pending.pop(call_id, None)
        if entry is None:
            return
        name, size = entry
        self.shared.args_held -= size
        if tool.destructive is True:  # what the prelude tracks (effectful_names_json)
            self.shared.note_effect(call_id, name, value)
        ok, payload, is_text = result_payload(value, name, self.shared.args_held, self.limits.tool_data_bytes)
        unread = self.unread
        unread[call_id] = (name, value)
        self.channel.post(call_id, ok, payload, is_text)
        keep = self.channel.unread
        while len(unread) > keep:
            unread.popitem(last=False)

    def _reject(self, call_id: int, failure: ToolFailure) -> None:
        entry = self._pending.pop(call_id, None)
        if entry is not None:
            self.shared.args_held -= entry[1]
        self.channel.post(call_id, False, failure_json(failure), False)


class RunView:
    """A live view of one running program, for progress reports (`Engine.run` fills it in)."""

    def __init__(self) -> None:
        self._program: ProgramThread | None = None

    @property
    def printed_chars(self) -> int:
        """Characters printed so far (0 before the program starts)."""
        return 0 if self._program is None else self._program.printed_chars

    @property
    def tool_calls(self) -> int:
        """Tool calls started so far."""
        return 0 if self._program is None else self._program.tool_calls


def _ran_out_of_memory(outcome: Any) -> bool:
    """Whether a program's context held much memory: it ran out of its limit (`WorkerPool`)."""
    error = getattr(outcome, "error", None)
    return error is not None and error.kind == "out_of_memory"


def _streamer(spawner: LoopSpawner, hook: Callable[[str], object]) -> Callable[[str], None]:
    """``hook`` called on the loop's thread for each piece of printed text, from any thread,
    without waiting for it (a hook that raises is ignored: printing never fails for it)."""

    def call(text: str) -> None:
        try:
            hook(text)
        except Exception:  # the caller's display must not break the run
            pass

    return lambda text: spawner.call_soon(lambda: call(text))


# How long calls the program left running get to stop (or finish) once it has ended.
_LATE_SECONDS = 5.0


class Engine:
    """Runs Code Mode programs against one tool registry.

    Args:
        registry: The tools programs can call.
        limits: Per-program limits.
        max_programs: Programs running at once (each holds one worker thread).
    """

    def __init__(self, registry: ToolRegistry, limits: EngineLimits, *, max_programs: int = 64) -> None:
        self.registry = registry
        self.limits = limits
        self._workers = WorkerPool(
            prepare_context, max_programs, heavy=_ran_out_of_memory, free=_qjs.Context.free
        )

    def close(self) -> None:
        """Let the idle JS threads exit."""
        self._workers.close()

    async def run(
        self,
        source: str,
        context: ToolContext,
        *,
        timeout_seconds: float,
        gate: CallGate | None = None,
        view: RunView | None = None,
        on_output: Callable[[str], object] | None = None,
    ) -> ProgramOutcome:
        """Run one program to its end; guest failures come back in the outcome, never raised.

        Args:
            source: The program.
            context: The calling session's tool context.
            timeout_seconds: Its wall-clock limit.
            gate: The host's approvals: decides, in batches, which calls may run.
            view: Filled in with a live view of the program while it runs (progress reports).
            on_output: Called on the event loop's thread with each piece of printed text as
                the host collects it (when the program waits for something, and every 1 MiB),
                in order; what it raises is ignored. The program never waits for it.

        Raises:
            UserError: Not running on the asyncio backend.
        """
        spawner = LoopSpawner()
        stream = _streamer(spawner, on_output) if on_output is not None else None
        program, calls = self._program(source, context, timeout_seconds, gate, spawner, view, stream)
        # Its first stretch runs here, on a context made ahead: one that ends there (a program
        # that calls nothing) needs no worker thread (ProgramThread.first_stretch).
        ready = _qjs.take_ready()
        first = program.first_stretch(ready) if ready is not None else START_OVER
        if isinstance(first, ProgramOutcome):
            if first.pending_calls:  # a call starts when the program makes it, awaited or not
                calls.on_posted()
                await anyio.lowlevel.checkpoint()  # (their first steps run on the loop's next turn)
            return await self._settle_pending(first, calls)
        resumed: _qjs.Context | None = None
        if first == WAITING:
            resumed = ready
        elif ready is not None:  # it starts over: what its first stretch did goes with its channel
            program, calls = self._program(source, context, timeout_seconds, gate, spawner, view, stream)
        del ready
        fd = calls.channel.fileno()
        spawner.watch_readable(fd, calls.on_posted)
        finished = False
        try:
            if resumed is not None:
                outcome: ProgramOutcome = await self._workers.run(program.resume, spawner, resumed)
            else:
                outcome = await self._workers.run(program.run, spawner)
            finished = True
        finally:
            spawner.unwatch_readable(fd)
            if not finished:  # this call was cancelled: stop the program and its calls
                spawner.close()
                program.cancel()
        return await self._settle_pending(outcome, calls)

    def _program(
        self,
        source: str,
        context: ToolContext,
        timeout_seconds: float,
        gate: CallGate | None,
        spawner: LoopSpawner,
        view: RunView | None,
        stream: Callable[[str], None] | None = None,
    ) -> tuple[ProgramThread, _Calls]:
        """A program and the loop's side of its calls, joined by a channel of their own."""
        # When someone is asked about calls, the program wakes the loop only when it waits: the
        # calls it made meanwhile (a Promise.all) are asked about as one batch.
        channel = _qjs.Channel(immediate=gate is None or not gate.batches)
        shared = ProgramCalls()
        calls = _Calls(self.registry, context, self.limits, gate, channel, spawner, shared)
        program = ProgramThread(
            source=source,
            registry=self.registry,
            context=context,
            limits=self.limits,
            timeout_seconds=timeout_seconds,
            channel=channel,
            calls=shared,
            # With batched decisions every call goes to the loop, where they are asked about.
            inline_json="[]" if gate is not None and gate.batches else self.registry.inline_names_json(),
            gate=gate,
            on_output=stream,
        )
        if view is not None:
            view._program = program
        return program, calls

    async def _settle_pending(self, outcome: ProgramOutcome, calls: _Calls) -> ProgramOutcome:
        """Stop the calls the program left pending and say what each really did.

        A call that took effect although nothing awaited it (a background process started, a
        file written) is reported with its result; only one that was stopped is "cancelled".
        """
        spawner = calls.spawner
        spawner.stop_runs()
        await spawner.aclose(_LATE_SECONDS)
        if not outcome.pending_calls:
            return outcome
        # Calls that finished after the program stopped reading: their results are unread.
        done = {cid: value for cid, (_, value) in calls.unread.items() if cid in outcome.pending_calls}
        outcome.cancelled = [name for cid, name in outcome.pending_calls.items() if cid not in done]
        outcome.late = [(outcome.pending_calls[cid], as_result(value)) for cid, value in sorted(done.items())]
        return outcome
