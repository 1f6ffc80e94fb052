"""The process manager: the ``bash`` tool's handler and the host's and CLI's entry points."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from codemode.archive import Archive, Redactor
from codemode.errors import ToolError
from codemode.tools._bash._env import resolve_cwd
from codemode.tools._bash._foreground import Running, RunSpec, run_foreground
from codemode.tools._bash._tool import DEFAULT_TIMEOUT_SECONDS, BashArgs, description, guidance
from codemode.tools._model import Extension, ToolContext, ToolResult, make_tool


@dataclass(frozen=True)
class Notification:
    """A background process's completion, queued for its session until acknowledged.

    Attributes:
        id: Identifies the notification in :meth:`ProcessManager.ack`.
        process_id: The process that ended.
        command: Its command line.
        exit_code: Its exit code; None when it cannot be known.
        text: One line for the model, e.g. ``Background process p_1 (make) exited with code 0``.
    """

    id: int
    process_id: str
    command: str
    exit_code: int | None
    text: str


class ProcessManager:
    """Runs commands for the ``bash`` tool and owns the records of background processes.

    Args:
        archive: The host's archive (logs, SQLite records).
        handoff_seconds: A foreground run still going after ``min(handoff_seconds, timeout)``
            moves to the background; None switches hand-off off (runs wait to their timeout).
        max_background_per_session: Cap on live background processes per session.
        redactor: Redacts text before it is returned (default: one over ``os.environ``).
        environ: The environment commands start from (default ``os.environ``).
    """

    def __init__(
        self,
        archive: Archive,
        *,
        handoff_seconds: float | None = 10.0,
        max_background_per_session: int = 32,
        redactor: Redactor | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._archive = archive
        self._handoff = handoff_seconds
        self._max_background = max_background_per_session
        self._redactor = redactor if redactor is not None else Redactor(os.environ)
        self._environ = dict(environ if environ is not None else os.environ)
        self._foreground: set[Running] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the tool

    def extension(self) -> Extension:
        """The ``bash`` tool and its guidance for the run_code description."""
        tool = make_tool(
            self._handle,
            name="bash",
            description=description(self._handoff),
            input_model=BashArgs,
        )
        return Extension(name="bash", tools=[tool], guidance=guidance(self._handoff), on_close=None)

    async def _handle(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
        args.check()
        if args.action == "run":
            return await self._run(args, ctx)
        raise ToolError(f"bash action {args.action!r} is not available yet")

    async def _run(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
        assert args.command is not None
        cwd = resolve_cwd(args.cwd, Path(ctx.workspace), ctx.policy)
        spec = RunSpec(
            command=args.command,
            cwd=cwd,
            timeout_seconds=args.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
            session_id=ctx.session_id,
            policy=ctx.policy,
            purpose=args.purpose,
            scope=args.scope,
            lifecycle=args.lifecycle or "session",
            completion_mode=args.completion_mode or "resume",
            environ=self._environ,
        )
        outcome = await run_foreground(
            spec,
            archive=self._archive,
            redactor=self._redactor,
            handoff_seconds=self._handoff,
            promote=self._promote,
            track=self._track,
        )
        return ToolResult.from_text(outcome.text, outcome.structured, is_error=outcome.is_error)

    def _track(self, running: Running, active: bool) -> None:
        with self._lock:
            if active:
                self._foreground.add(running)
            else:
                self._foreground.discard(running)

    def _promote(self, running: Running) -> str:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Host shutdown: stop foreground runs (their callers get a 'stopped' result)."""
        with self._lock:
            runs = list(self._foreground)
        for running in runs:
            running.pump.wake()
