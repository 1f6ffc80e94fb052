"""The Runner: one program (or one direct tool call) from source to recorded result.

It reads the options header, clamps the budget and timeout to the host's limits, runs the
program on the engine with the approvals as its gate, turns what the program left behind into
notes, fits the text to the budget (`codemode.runner._shape`) and records the result under its
session and call id, replaying a recorded id. The Host owns one and hands it the parts it wires.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import anyio

from codemode._ids import check_id
from codemode._progress import Progress, ProgressCallback, reporting
from codemode._results import CallResult, HostConfig, RunError, RunImage, RunResult, error_content
from codemode._sessions import Sessions
from codemode._trace import Tracing, current, failed
from codemode.budget import MIN_BUDGET, TokenCounter
from codemode.engine import Engine, EngineLimits, HeaderError, RunView, parse_header
from codemode.errors import ErrorCode, ToolError, UserError
from codemode.policy import Approvals
from codemode.runner._shape import (
    count_ready,
    fit,
    late_notice,
    name_promoted,
    run_error,
    run_result,
    shown_images,
    tool_images,
)
from codemode.state import State, redact_json
from codemode.tools import ProgramScope, ToolRegistry, ToolResult
from codemode.tools.bash import ProcessManager

__all__ = ["Runner"]


class Runner:
    """Runs programs and direct calls for one Host, on its own `Engine` (limits from the config).

    Args:
        config: The host's configuration (budgets, timeouts and their limits).
        registry: The tools.
        counter: Counts the tokens of what the model reads.
        approvals: The gate every call passes (cheap when nothing is asked: a permission lookup
            and a look for capability arguments); without a callback nothing asks, but a call
            still gets no more than the host allows.
        state: The open state directory (raises `UserError` when the host is not open).
        sessions: The host's sessions (each call's context, the notifications results carry).
        processes: The process manager, or None (not open, or no built-in tools).
        connect: Connects the MCP servers not tried yet.
    """

    def __init__(
        self,
        config: HostConfig,
        registry: ToolRegistry,
        counter: TokenCounter,
        approvals: Approvals,
        *,
        state: Callable[[], State],
        sessions: Sessions,
        processes: Callable[[], ProcessManager | None],
        connect: Callable[[], Awaitable[None]],
    ) -> None:
        self.config = config
        self.engine = Engine(
            registry,
            EngineLimits(
                memory_bytes=config.memory_mb * 1024 * 1024,
                cpu_seconds=config.cpu_seconds,
                tool_concurrency=config.tool_concurrency,
                calls_in_flight=config.calls_in_flight,
                tool_data_bytes=config.tool_data_mb * 1024 * 1024,
            ),
            mode=config.engine,
            max_workers=config.max_workers,
            idle_workers=config.idle_workers,
        )
        self.registry = registry
        self.counter = counter
        self.approvals = approvals
        self._state = state
        self.sessions = sessions
        self._processes = processes
        self._connect = connect
        self._sessions_noted: set[str] = set()  # sessions this runner has marked known in the state dir
        self._in_flight: dict[tuple[str, str], anyio.Event] = {}
        self.tracing = Tracing(config.tracing, config.tracer_provider)

    def forget_session(self, session_id: str) -> None:
        """A server front keeps nothing per ended session (nor its idle engine workers)."""
        self._sessions_noted.discard(session_id)
        self.engine.forget_session(session_id)

    # -- run_code ---------------------------------------------------------------------------

    async def run_code(
        self,
        source: str,
        *,
        session_id: str | None,
        call_id: str | None,
        max_output_tokens: int | None,
        timeout_seconds: float | None,
        on_progress: ProgressCallback | None,
        on_output: Callable[[str], object] | None,
    ) -> RunResult:
        """`Host.run_code`: run one program, or replay the result recorded under its call id.

        Traced, in a span of its own (GenAI's ``execute_tool run_code``): its session and call
        id, its limits and its usage as attributes; its calls, approvals and commands under it.
        """
        trace = self.tracing.root()
        if trace is None:
            return await self._run_code(
                source, session_id, call_id, max_output_tokens, timeout_seconds, on_progress, on_output
            )
        with trace.span("execute_tool run_code", _run_attributes(self.config)) as span:
            result = await self._run_code(
                source, session_id, call_id, max_output_tokens, timeout_seconds, on_progress, on_output
            )
            span.set_attributes(_usage_attributes(result))
            span.detail(result=result)
            if result.error is not None:
                failed(span, result.error.kind)
        return result

    async def _run_code(
        self,
        source: str,
        session_id: str | None,
        call_id: str | None,
        max_output_tokens: int | None,
        timeout_seconds: float | None,
        on_progress: ProgressCallback | None,
        on_output: Callable[[str], object] | None,
    ) -> RunResult:
        runs = self._state().runs
        await self._connect()
        if timeout_seconds is not None and not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
            raise UserError(f"timeout_seconds must be a positive number of seconds, got {timeout_seconds!r}")
        if max_output_tokens is not None and max_output_tokens <= 0:
            raise UserError(f"max_output_tokens must be positive, got {max_output_tokens!r}")
        session = self.sessions.check(session_id)
        call = check_id(call_id, "call_id") if call_id is not None else f"run_{uuid.uuid4().hex}"
        # Call ids are the caller's; records are kept per session (two columns, never one joined
        # key) so one session can never replay (read) another's result by choosing its id.
        record_key = (session, call)
        digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        if call_id is not None:  # a fresh id has nothing to replay
            replayed = await self._replay(record_key, digest)
            if replayed is not None:
                return replayed
        done = self._in_flight[record_key] = anyio.Event()
        try:
            result = await self._run(
                source, session, call, max_output_tokens, timeout_seconds, on_progress, on_output
            )
            if call_id is not None:  # only a caller's id can ever replay: a fresh one is not kept
                runs.record(session, call, result.model_dump_json(), digest)
            elif session not in self._sessions_noted:  # one write per session, not per run
                runs.note_session(session)
                self._sessions_noted.add(session)
            return result
        finally:
            self._in_flight.pop(record_key, None)
            done.set()

    async def _replay(self, record_key: tuple[str, str], digest: str) -> RunResult | None:
        """The recorded result of this call id, unchanged, if its source is the same.

        A recorded id with a different source is an error result naming the id (nothing runs):
        replaying the old result would answer a program the caller did not send.
        """
        in_flight = self._in_flight.get(record_key)
        if in_flight is not None:
            await in_flight.wait()
        recorded = self._state().runs.get(*record_key)
        if recorded is None:
            return None
        if recorded.source_sha256 is None or recorded.source_sha256 == digest:
            return RunResult.model_validate_json(recorded.result_json)
        session, call = record_key
        message = (
            f"call id {call!r} was already used in this session for a different program; nothing ran. "
            "Use a new call id for a new program (the same id with the same source replays its result)"
        )
        error = RunError(kind="options", name="CallIdReused", message=message)
        return await self._refused(
            call, session, error, [], self.config.max_output_tokens, time.perf_counter()
        )

    async def _refused(
        self, call: str, session: str, error: RunError, notices: list[str], budget: int, started: float
    ) -> RunResult:
        """The result of a program that did not run (its options, its reused call id)."""
        exact = await count_ready(
            self.counter, self.config.preload_tokenizer, budget, error.message, *notices
        )
        return self._result(
            call=call,
            session=session,
            output="",
            error=error,
            cancelled=[],
            notices=notices,
            budget=budget,
            tool_calls=0,
            cpu_ms=0,
            started=started,
            exact=exact,
        )

    def _result(self, *, session: str, **fields: Any) -> RunResult:
        state = self._state()
        return run_result(
            state.archive, self.counter, self.sessions.take_notifications(session), session=session, **fields
        )

    async def _run(
        self,
        source: str,
        session: str,
        call: str,
        max_output_tokens: int | None,
        timeout_seconds: float | None,
        on_progress: ProgressCallback | None = None,
        on_output: Callable[[str], object] | None = None,
    ) -> RunResult:
        started = time.perf_counter()
        config = self.config
        notices: list[str] = []
        trace = current()
        if trace is not None:  # a watcher (the console) shows the program from here on
            trace.describe(session_id=session, call_id=call, source=source)
        try:
            header = parse_header(source)
        except HeaderError as exc:
            options_error = RunError(kind="options", name="OptionsError", message=f"{exc}; nothing ran")
            return await self._refused(
                call, session, options_error, notices, config.max_output_tokens, started
            )
        budget = header.max_output_tokens or max_output_tokens or config.max_output_tokens
        if budget > config.max_output_tokens_limit:
            notices.append(
                f"max_output_tokens {budget} is above this host's limit; "
                f"clamped to {config.max_output_tokens_limit}"
            )
            budget = config.max_output_tokens_limit
        if budget < MIN_BUDGET:  # (the header's own value is checked by parse_header)
            message = (
                f"max_output_tokens must be at least {MIN_BUDGET} (room for the line naming the archived "
                f"rest), got {budget}; nothing ran"
            )
            too_small = RunError(kind="options", name="OptionsError", message=message)
            # The refused budget cannot carry its own refusal: the host's default budget does.
            return await self._refused(call, session, too_small, notices, config.max_output_tokens, started)
        timeout = header.timeout_seconds or timeout_seconds or config.timeout_seconds
        if timeout > config.max_timeout_seconds:
            notices.append(
                f"timeout_seconds {timeout:g} is above this host's limit; clamped to {config.max_timeout_seconds:g}"
            )
            timeout = config.max_timeout_seconds
        if trace is not None:
            trace.annotate(
                {"codemode.limits.timeout_seconds": timeout, "codemode.limits.max_output_tokens": budget}
            )
        # Calls of the program wait for their answers up to its deadline (see ProgramScope).
        scope = ProgramScope(deadline=time.monotonic() + timeout)
        context = replace(await self.sessions.context(session, call), program=scope)
        view = RunView()

        def sample(elapsed: float) -> Progress:
            processes = self._processes()
            output = processes.output_bytes(session, call) if processes is not None else 0
            return Progress(
                elapsed_seconds=elapsed,
                printed_chars=view.printed_chars,
                tool_calls=view.tool_calls,
                output_bytes=output,
                waiting_for_worker=view.waiting,
            )

        async with reporting(on_progress, sample):
            outcome = await self.engine.run(
                source, context, timeout_seconds=timeout, gate=self.approvals, view=view, on_output=on_output
            )
        if scope.promoted and outcome.error is not None:
            outcome.error = name_promoted(outcome.error, scope.promoted)
            for _ in scope.promoted:  # promoted, not stopped: not "cancelled"
                if "bash" in outcome.cancelled:
                    outcome.cancelled.remove("bash")
        archive = self._state().archive
        error = run_error(outcome.error, archive.redactor.redact) if outcome.error is not None else None
        if outcome.dropped_timers and outcome.error is None:
            notices.append(
                f"{outcome.dropped_timers} timer(s) had not fired when the program ended and were dropped; "
                "await them (e.g. await sleep(ms)) if their callbacks matter"
            )
        if outcome.output_dropped_bytes:
            notices.append(
                f"{outcome.output_dropped_bytes:,} printed characters beyond the in-memory limit were "
                "dropped; print less"
            )
        for name, value in outcome.unawaited:
            notices.append(late_notice(name, value, "while the program ran"))
        if outcome.unawaited_more:
            notices.append(
                f"{outcome.unawaited_more} more calls that change something finished while the program ran "
                "without being awaited; await every call you start"
            )
        for name, value in outcome.late:
            notices.append(late_notice(name, value, "after the program ended"))
        images: list[RunImage] = shown_images(archive, outcome.images, budget, session, notices)
        described = [error.message, error.stack] if error is not None else []
        exact = await count_ready(
            self.counter, self.config.preload_tokenizer, budget, outcome.output, *described, *notices
        )
        return self._result(
            call=call,
            session=session,
            output=outcome.output,
            error=error,
            cancelled=outcome.cancelled,
            notices=notices,
            budget=budget,
            tool_calls=outcome.tool_calls,
            cpu_ms=outcome.cpu_seconds * 1000,
            started=started,
            guest_error=outcome.error,
            images=images,
            exact=exact,
        )

    # -- direct calls -----------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        args: Mapping[str, object] | None,
        *,
        session_id: str | None,
        call_id: str | None,
        max_output_tokens: int | None,
        on_progress: ProgressCallback | None,
    ) -> CallResult:
        """`Host.call_tool`: one tool called directly, its text fit to the budget.

        Traced, in a span of its own (GenAI's ``execute_tool``), its approval and command under it.
        """
        trace = self.tracing.root()
        if trace is None:
            return await self._call_tool(name, args, session_id, call_id, max_output_tokens, on_progress)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        with trace.span(f"execute_tool {name}", attributes) as span:
            inner = current()
            if inner is not None:  # a watcher (the console) shows the call as a run of its own
                with contextlib.suppress(UserError):  # (_call_tool refuses the id, with its message)
                    inner.describe(session_id=self.sessions.check(session_id), call_id=call_id, args=args)
            result = await self._call_tool(name, args, session_id, call_id, max_output_tokens, on_progress)
            span.detail(result=result)
            span.set_attributes(
                {
                    "codemode.session.id": self.sessions.check(session_id),
                    "codemode.truncated": result.truncated,
                }
            )
            if result.code is not None:
                failed(span, result.code.value)
        return result

    async def _call_tool(
        self,
        name: str,
        args: Mapping[str, object] | None,
        session_id: str | None,
        call_id: str | None,
        max_output_tokens: int | None,
        on_progress: ProgressCallback | None,
    ) -> CallResult:
        session = self.sessions.check(session_id)
        if call_id is not None:
            check_id(call_id, "call_id")
        # A call that reports progress needs an id its commands are counted under.
        call = call_id if call_id is not None or on_progress is None else f"call_{uuid.uuid4().hex}"
        context = await self.sessions.context(session, call)
        await self._connect()

        def sample(elapsed: float) -> Progress:
            processes = self._processes()
            output = processes.output_bytes(session, call) if processes and call else 0
            return Progress(elapsed_seconds=elapsed, output_bytes=output)

        arguments = args if args is not None else {}
        budget = min(max_output_tokens or self.config.max_output_tokens, self.config.max_output_tokens_limit)
        refusal = await self._approve(name, arguments, session) if budget >= MIN_BUDGET else None
        if budget < MIN_BUDGET:
            message = (
                f"max_output_tokens must be at least {MIN_BUDGET} (room for the line naming the archived "
                f"rest), got {budget}; nothing ran"
            )
            result: ToolResult = ToolResult.failure(
                ErrorCode.INVALID_ARGUMENTS, message, {"minimum": MIN_BUDGET}
            )
            budget = self.config.max_output_tokens  # the refused budget cannot carry its own refusal
        elif refusal is not None:
            result = ToolResult.failure(ErrorCode.DENIED, refusal)
        else:
            async with reporting(on_progress, sample):
                result = await self.registry.call(name, arguments, context)
        # A watcher's events go at the end of the next result, as monitor_start says, never its
        # own: a quick command's events would otherwise race the start's result for them.
        started = (result.structured_content or {}).get("watcher_id") if name == "monitor_start" else None
        hold = frozenset([started] if isinstance(started, str) and not result.is_error else [])
        trailer = "\n".join(self.sessions.take_notifications(session, hold))
        blocks = [block.text for block in result.content]
        archive = self._state().archive
        tool = self.registry.get(name)
        images = await tool_images(archive, result, bool(tool and tool.origin), budget, session)
        exact = await count_ready(self.counter, self.config.preload_tokenizer, budget, *blocks, trailer)
        image_cost = sum(image.tokens for image in images)
        fitted = fit(
            archive, self.counter, blocks, trailer, max(MIN_BUDGET, budget - image_cost), session, exact
        )
        failure = result.error
        structured = (
            result.structured_content if failure is None else error_content(failure.code, failure.data)
        )
        return CallResult(
            tool=name,
            text=fitted.text,
            structured_content=redact_json(structured, archive.redactor.redact),
            is_error=result.is_error,
            code=None if failure is None else failure.code,
            truncated=fitted.truncated,
            refs=fitted.refs,
            images=images,
        )

    async def _approve(self, name: str, arguments: Mapping[str, object], session: str) -> str | None:
        """Ask the approvals about one direct call; the refusal, or None."""
        tool = self.registry.get(name)
        if tool is None:
            return None
        try:
            tool.parse(arguments)
        except ToolError:
            return None  # the call itself reports its invalid arguments; nothing to approve
        refusal = await self.approvals.approve_call(tool, arguments, session)
        return None if refusal is None else f"{name}: {refusal}"


def _run_attributes(config: HostConfig) -> dict[str, str | int | float]:
    """A program span's attributes known before it runs: the host's limits of every program."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "run_code",
        "codemode.engine": config.engine,
        "codemode.limits.cpu_seconds": config.cpu_seconds,
        "codemode.limits.memory_mb": config.memory_mb,
        "codemode.limits.tool_concurrency": config.tool_concurrency,
        "codemode.limits.calls_in_flight": config.calls_in_flight,
    }


def _usage_attributes(result: RunResult) -> dict[str, str | int | float | bool]:
    """A program span's attributes from its result: who ran it, what it used, how it ended."""
    usage = result.usage
    return {
        "gen_ai.tool.call.id": result.call_id,
        "codemode.session.id": result.session_id,
        "codemode.limits.max_output_tokens": usage.max_output_tokens,
        "codemode.usage.output_tokens": usage.output_tokens,
        "codemode.usage.printed_bytes": usage.printed_bytes,
        "codemode.usage.tool_calls": usage.tool_calls,
        "codemode.usage.cpu_ms": usage.cpu_ms,
        "codemode.usage.wall_ms": usage.wall_ms,
        "codemode.truncated": result.truncated,
        "codemode.cancelled_calls": len(result.cancelled_calls),
    }
