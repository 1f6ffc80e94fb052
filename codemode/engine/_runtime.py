"""The async side of the engine: runs a program thread and its tool calls as tasks."""

from __future__ import annotations

from typing import Any

from codemode.engine._loop import LoopSpawner
from codemode.engine._program import (
    EngineLimits,
    PreparedContext,
    ProgramOutcome,
    ProgramThread,
    ToolDispatcher,
)
from codemode.engine._workers import WorkerPool
from codemode.tools import Tool, ToolContext, ToolRegistry, ToolResult


class _Dispatcher(ToolDispatcher):
    """Runs each tool call as a task on the host loop and posts its result to the program."""

    def __init__(self, registry: ToolRegistry, context: ToolContext, spawner: LoopSpawner) -> None:
        self.registry = registry
        self.context = context
        self.spawner = spawner
        self.program: ProgramThread | None = None

    def start(self, call_id: int, tool: Tool, args: Any) -> None:
        program = self.program
        assert program is not None

        async def run_tool() -> None:
            # The result is turned into JSON on the program's thread, not on the event loop.
            try:
                value = await self.registry.invoke_raw(tool, args, self.context)
            except Exception as exc:  # invoke_raw maps handler errors; this is a last resort
                value = ToolResult.from_text(f"{tool.name} failed: {exc}", is_error=True)
            program.inbox.put((call_id, value))

        def refused() -> None:
            ended = ToolResult.from_text(f"{tool.name}: the program has ended", is_error=True)
            program.inbox.put((call_id, ended))

        self.spawner.spawn(run_tool, refused)


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
        self._workers = WorkerPool(PreparedContext.create, max_programs)

    def close(self) -> None:
        """Let the idle JS threads exit."""
        self._workers.close()

    async def run(self, source: str, context: ToolContext, *, timeout_seconds: float) -> ProgramOutcome:
        """Run one program to its end; guest failures come back in the outcome, never raised.

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
        )
        dispatcher.program = program

        try:
            outcome: ProgramOutcome = await self._workers.run(program.run)
            return outcome
        finally:
            # Also what stops the program when this call is cancelled.
            spawner.close()
            program.cancel()
