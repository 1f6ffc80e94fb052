"""The async side of the engine: runs a program on a JS thread and its tool calls on the event loop.

A program posts its tool calls to its ``_qjs.Channel``; the channel's eventfd wakes the loop,
where `LoopCalls` checks each call once, asks the gate, runs it in the spawner's runner tasks, and
posts its result's JSON back to the program, which settles the call on its own thread without
the GIL.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal, Protocol

import anyio.lowlevel
import anyio.to_thread

from codemode.engine import _qjs
from codemode.engine._calls import LoopCalls
from codemode.engine._guest import START_OVER, WAITING
from codemode.engine._loop import LoopSpawner
from codemode.engine._outcome import CallGate, EngineLimits, ProgramCalls, ProgramOutcome, as_result
from codemode.engine._processes import ProcessPool
from codemode.engine._program import ProgramThread
from codemode.engine._remote import run_in_worker
from codemode.engine._text import prepare_context
from codemode.engine._workers import WorkerPool
from codemode.engine._zygote_client import start_zygote_soon
from codemode.tools import ToolContext, ToolRegistry


class _Viewed(Protocol):
    @property
    def printed_chars(self) -> int: ...
    @property
    def tool_calls(self) -> int: ...


class RunView:
    """A live view of one running program, for progress reports (`Engine.run` fills it in)."""

    def __init__(self) -> None:
        self._program: _Viewed | None = None
        self.waiting = False  # for an engine worker (process mode: every one is busy)

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


EngineMode = Literal["process", "thread"]
# Worker processes a process-mode engine may hold at least, whatever the CPUs: as many programs
# as thread mode runs at once (max_programs' default). A program awaiting a long tool call keeps
# its worker (~4 MiB of its own, PSS; the rest is shared with the zygote), so programs that
# mostly wait must not queue behind a handful of them: 200 programs awaiting a 20 ms tool ran at
# 0.24x thread mode's rate with 16 workers (bench/bench_engine_modes.py).
_MIN_WORKERS = 64
# Idle workers kept for their sessions' next programs: one per ~16 MiB of the machine's memory
# (an idle worker holds ~3.3 MiB of its own, PSS), at most 1,024. A session without one pays a
# new worker (~8 ms of CPU) on its next program: with 1,000 sessions and 64 idle workers that
# was every call (bench/bench_front.py: 12.9 ms of server CPU per call, 5.6 ms with one each).
_IDLE_WORKERS_MAX = 1024
_IDLE_WORKER_SHARE = 16 * 1024 * 1024
# What a worker process may map beside its program's heap (the interpreter, its threads' stacks
# and malloc arenas): its RLIMIT_AS is the program's memory limit plus this.
_WORKER_OVERHEAD_BYTES = 1024 * 1024 * 1024

# How long calls the program left running get to stop (or finish) once it has ended.
_LATE_SECONDS = 5.0


class Engine:
    """Runs Code Mode programs against one tool registry.

    Args:
        registry: The tools programs can call.
        limits: Per-program limits.
        max_programs: Programs running at once in thread mode (each holds one worker thread).
        mode: ``process``: each program runs in a confined worker process (a crash or an
            exploit of QuickJS costs that program only); ``thread``: in a thread of this
            process (the lowest latency, for programs you trust).
        max_workers: Worker processes running programs at once in process mode (default 4 per
            CPU, at least 64); programs beyond wait for one.
        idle_workers: Worker processes kept idle for their sessions' next programs (default one
            per 16 MiB of memory, at most 1,024).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        limits: EngineLimits,
        *,
        max_programs: int = 64,
        mode: EngineMode = "thread",
        max_workers: int | None = None,
        idle_workers: int | None = None,
    ) -> None:
        self.registry = registry
        self.limits = limits
        self.mode = mode
        self._workers = WorkerPool(
            prepare_context, max_programs, heavy=_ran_out_of_memory, free=_qjs.Context.free
        )
        self._processes = (
            ProcessPool(
                max_workers or max(_MIN_WORKERS, 4 * (os.cpu_count() or 1)),
                address_space_bytes=limits.memory_bytes + _WORKER_OVERHEAD_BYTES,
                idle_workers=_idle_workers() if idle_workers is None else idle_workers,
            )
            if mode == "process"
            else None
        )

    def start_soon(self) -> None:
        """In process mode, start the zygote now on a thread (`start_zygote_soon`): it boots while
        the host opens instead of when the first program needs a worker."""
        if self._processes is not None:
            start_zygote_soon()

    @property
    def processes(self) -> ProcessPool | None:
        """The worker processes (process mode), else None."""
        return self._processes

    def close(self) -> None:
        """Let the idle JS threads exit, and end the idle worker processes."""
        self._workers.close()
        if self._processes is not None:
            self._processes.close()

    def forget_session(self, session_id: str) -> None:
        """A session ended: end its idle worker processes."""
        if self._processes is not None:
            self._processes.forget_session(session_id)

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
        if self._processes is not None:
            remote, loop_calls = await run_in_worker(
                self._processes,
                self.registry,
                self.limits,
                source,
                context,
                timeout_seconds=timeout_seconds,
                gate=gate,
                spawner=spawner,
                stream=stream,
                view=view,
            )
            return await self._settle_pending(remote, loop_calls)
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
        fd = program.channel.fileno()
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
    ) -> tuple[ProgramThread, LoopCalls]:
        """A program and the loop's side of its calls, joined by a channel of their own."""
        # When someone is asked about calls, the program wakes the loop only when it waits: the
        # calls it made meanwhile (a Promise.all) are asked about as one batch.
        channel = _qjs.Channel(immediate=gate is None or not gate.batches)
        shared = ProgramCalls()
        calls = LoopCalls(self.registry, context, self.limits, gate, channel, spawner, shared)
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

    async def _settle_pending(self, outcome: ProgramOutcome, calls: LoopCalls) -> ProgramOutcome:
        """Stop the calls the program left pending and say what each really did.

        A call that took effect although nothing awaited it (a background process started, a
        file written) is reported with its result; only one that was stopped is "cancelled". A
        call of a tool that declares it changes nothing (``read_only``) did nothing to report,
        whenever it finished (as while the program ran: `ProgramCalls.unawaited`).
        """
        spawner = calls.spawner
        spawner.stop_runs()
        await spawner.aclose(_LATE_SECONDS)
        if not outcome.pending_calls:
            return outcome
        # Calls that finished after the program stopped reading: their results are unread.
        done = {cid: value for cid, (_, value) in calls.unread.items() if cid in outcome.pending_calls}
        outcome.cancelled = [name for cid, name in outcome.pending_calls.items() if cid not in done]
        outcome.late = [
            (outcome.pending_calls[cid], as_result(value))
            for cid, value in sorted(done.items())
            if not self._changes_nothing(outcome.pending_calls[cid])
        ]
        return outcome

    def _changes_nothing(self, name: str) -> bool:
        tool = self.registry.get(name)
        return tool is not None and tool.read_only


def _idle_workers() -> int:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(1, min(_IDLE_WORKERS_MAX, memory // _IDLE_WORKER_SHARE))
