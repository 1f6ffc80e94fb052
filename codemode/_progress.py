"""Progress of a long call, sampled while it runs, for fronts that report it (MCP progress).

Nothing is counted for progress: a sample reads counters the engine and the process manager
keep anyway (characters printed, tool calls started, bytes a command wrote), once per
`PROGRESS_INTERVAL_SECONDS`, and only while a caller asked for reports.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pydantic

__all__ = ["PROGRESS_INTERVAL_SECONDS", "Progress", "ProgressCallback", "reporting"]

PROGRESS_INTERVAL_SECONDS = 1.0


class Progress(pydantic.BaseModel):
    """How far a running call has got.

    Attributes:
        elapsed_seconds: Time since the call started (grows with every report).
        printed_chars: Characters the program has printed (``run_code``; None for a direct call).
        tool_calls: Tool calls the program has started (``run_code``; None for a direct call).
        output_bytes: Bytes written so far by the commands this call runs in the foreground.
        waiting_for_worker: The program has not started: every engine worker is busy (process
            mode; the pool's maximum is ``max_workers``).
    """

    model_config = pydantic.ConfigDict(frozen=True)

    elapsed_seconds: float
    printed_chars: int | None = None
    tool_calls: int | None = None
    output_bytes: int = 0
    waiting_for_worker: bool = False

    def message(self) -> str:
        """One line for a person: ``"3 s: 1,204 characters printed, 2 tool calls, ..."``."""
        if self.waiting_for_worker:
            return f"{self.elapsed_seconds:.0f} s: waiting for an engine worker (all are busy)"
        parts = []
        if self.printed_chars is not None:
            parts.append(f"{self.printed_chars:,} characters printed")
        if self.tool_calls is not None:
            parts.append(f"{self.tool_calls} tool call{'' if self.tool_calls == 1 else 's'}")
        if self.output_bytes or self.printed_chars is None:
            parts.append(f"{self.output_bytes:,} bytes of command output")
        return f"{self.elapsed_seconds:.0f} s: " + ", ".join(parts)


ProgressCallback = Callable[[Progress], Awaitable[None]]


@asynccontextmanager
async def reporting(
    callback: ProgressCallback | None, sample: Callable[[float], Progress]
) -> AsyncIterator[None]:
    """While the body runs, send ``callback`` a `sample` (given the elapsed seconds) every
    `PROGRESS_INTERVAL_SECONDS`; nothing at all without a callback. A failing callback stops
    the reports, never the call."""
    if callback is None:
        yield
        return
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_SECONDS)
            try:
                await callback(sample(time.monotonic() - started))
            except Exception:  # the client went away, say: the call itself goes on
                return

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
