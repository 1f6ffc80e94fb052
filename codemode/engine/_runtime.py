"""The async side of the engine: runs a program thread and its tool calls as tasks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from codemode.engine._loop import LoopSpawner
from codemode.engine._program import (
    _APPROVED,
    CallGate,
    EngineLimits,
    PreparedContext,
    ProgramOutcome,
    ProgramThread,
    ToolDispatcher,
    as_result,
)
from codemode.engine._workers import WorkerPool
from codemode.errors import ErrorCode
from codemode.tools import Tool, ToolContext, ToolRegistry, ToolResult


class _Dispatcher(ToolDispatcher):
    """Runs each tool call on the host loop (in the spawner's runner tasks) and posts its result
    to the program."""

    def __init__(self, registry: ToolRegistry, context: ToolContext, spawner: LoopSpawner) -> None:
        self.registry = registry
        self.context = context
        self.spawner = spawner
        self.program: ProgramThread | None = None

    def cancel_all(self) -> None:
        """Ask every running call to stop (on the loop thread).

        Through anyio cancel scopes, which respect a shield in the tool: a background start
        finishes and reports its process.
        """
        self.spawner.stop_runs()

    def start(self, call_id: int, tool: Tool, args: Any) -> None:
        program = self.program
        assert program is not None

        async def run_tool() -> None:
            # The result is turned into JSON on the program's thread, not on the event loop.
            try:
                value = await self.registry.invoke_raw(tool, args, self.context)
            except Exception as exc:  # invoke_raw maps handler errors; this is a last resort
                value = ToolResult.failure(ErrorCode.HANDLER_FAILED, f"{tool.name} failed: {exc}")
            program.inbox.put((call_id, value))

        def refused() -> None:
            ended = ToolResult.failure(ErrorCode.CANCELLED, f"{tool.name}: the program has ended")
            program.inbox.put((call_id, ended))

        self.spawner.run_soon(run_tool, refused)

    def approve(self, batch: int, requests: list[Any]) -> None:
        program = self.program
        gate = program.gate if program is not None else None
        assert program is not None and gate is not None

        async def ask() -> None:
            decisions = await gate.decide(requests)
            program.inbox.put((_APPROVED, (batch, list(decisions))))

        def refused() -> None:
            pass  # the program has ended: its held calls are reported as cancelled

        self.spawner.spawn(ask, refused)


def _ran_out_of_memory(outcome: Any) -> bool:
    """Whether a program's context held much memory: it ran out of its limit (`WorkerPool`)."""
    error = getattr(outcome, "error", None)
    return error is not None and error.kind == "out_of_memory"


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
        self._workers = WorkerPool(PreparedContext.create, max_programs, heavy=_ran_out_of_memory)

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
    ) -> ProgramOutcome:
        """Run one program to its end; guest failures come back in the outcome, never raised.

        Args:
            source: The program.
            context: The calling session's tool context.
            timeout_seconds: Its wall-clock limit.
            gate: The host's approvals: decides, in batches, which calls may run.
            view: Filled in with a live view of the program while it runs (progress reports).

        Raises:
            UserError: Not running on the asyncio backend.
        """
        spawner = LoopSpawner()
        dispatcher = _Dispatcher(self.registry, context, spawner)
        program = ProgramThread(
            source=source,
            registry=self.registry,
            context=context,
            limits=self.limits,
            timeout_seconds=timeout_seconds,
            dispatcher=dispatcher,
            gate=gate,
        )
        dispatcher.program = program
        if view is not None:
            view._program = program

        finished = False
        try:
            outcome: ProgramOutcome = await self._workers.run(program.run)
            finished = True
        finally:
            # Also what stops the program when this call is cancelled.
            if not finished:
                spawner.close()
            program.cancel()
        return await self._settle_pending(outcome, program, dispatcher)

    async def _settle_pending(
        self, outcome: ProgramOutcome, program: ProgramThread, dispatcher: _Dispatcher
    ) -> ProgramOutcome:
        """Stop the calls the program left pending and say what each really did.

        A call that took effect although nothing awaited it (a background process started, a
        file written) is reported with its result; only one that was stopped is "cancelled".
        """
        dispatcher.cancel_all()
        await dispatcher.spawner.aclose(_LATE_SECONDS)
        if not outcome.pending_calls:
            return outcome
        # What the calls finished after the program stopped reading is still in its inbox.
        late = {call_id: value for call_id, value in program.inbox.drain() if isinstance(call_id, int)}
        done = {cid: as_result(value) for cid, value in late.items() if cid in outcome.pending_calls}
        return replace(
            outcome,
            cancelled=[name for cid, name in outcome.pending_calls.items() if cid not in done],
            late=[(outcome.pending_calls[cid], value) for cid, value in sorted(done.items())],
        )
