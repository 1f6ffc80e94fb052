"""One Code Mode program on its own thread, in the host's process (engine mode ``thread``).

The program's JavaScript (`codemode.engine._guest`) runs on the thread that runs
`ProgramThread.run`, without the GIL. Calls of inline tools and ``store``/``searchTools``/
``describeTool`` cross into Python on this thread and are answered at once (`HostCalls`, which a
worker process's calls reach too); every other tool call is posted to the event loop through the
program's ``_qjs.Channel``, where `codemode.engine._runtime` checks it, runs it and posts its
result back. The context holds no Python object the program can reach: its two host functions
take and return JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codemode._images import archived_image
from codemode._trace import Trace, current
from codemode.engine import _qjs
from codemode.engine._bridge import error_json, failure_json, result_payload
from codemode.engine._guest import GuestEnd, GuestError, GuestRun, GuestSpec
from codemode.engine._outcome import CallGate, EngineLimits, ProgramCalls, ProgramOutcome, outcome_of
from codemode.engine._text import _from_js_json, _to_json
from codemode.engine._typescript import TypeScriptError, strip_types
from codemode.engine._watchdog import Watch
from codemode.errors import ErrorCode, ToolError
from codemode.tools import ToolContext, ToolRegistry, ToolResult, failure_of


def strip_typescript(source: str) -> str | GuestError | None:
    """``source`` as JavaScript with its TypeScript types blanked (lines and columns kept); None
    when it is not TypeScript; the error when it is TypeScript that does not parse."""
    try:
        return strip_types(source)
    except TypeScriptError as ts:
        return GuestError("syntax_error", "TypeScriptError", str(ts), ts.line, ts.column)


@dataclass
class HostCalls:
    """The host's answers to the prelude's ``hostCall``: inline tools, the store, search and
    describe, answered at once on the thread that asks (a program's thread, or the thread that
    serves a worker process's calls).
    """

    registry: ToolRegistry
    context: ToolContext
    limits: EngineLimits
    calls: ProgramCalls
    gate: CallGate | None = None
    trace: Trace | None = field(default_factory=current)  # made in the program's context

    def __call__(self, kind: str, call_id: int, name: str, payload_json: str, size: int) -> str:
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
        trace = self.trace
        try:
            if trace is None:
                value = self.registry.invoke_inline(tool, args, self.context)
            else:  # (this thread has not the program's context: its span is handed over)
                span_id = f"{self.context.call_id}.{call_id}"
                value = self.registry.invoke_inline(tool, args, self.context, trace=trace, call_id=span_id)
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


@dataclass
class ProgramThread:
    """Runs one program in this process; `run` is called on a worker thread and returns its outcome.

    Attributes:
        channel: The program's channel to the event loop (calls out, results in, stop).
        calls: What this thread shares with the loop's side of the program's calls.
        inline_json: The tools the prelude calls through hostCall (a JSON array): every
            other call is posted to the loop.
        gate: The host's approvals, asked here about inline calls.
        on_output: Given each piece of printed text as the host collects it; must be thread-safe
            and must not block (the engine hands it to the event loop: `Engine.run`).
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
    on_output: Callable[[str], None] | None = None
    guest: GuestRun = field(init=False)

    def __post_init__(self) -> None:
        spec = GuestSpec(
            source=self.source,
            limits=self.limits,
            timeout_seconds=self.timeout_seconds,
            effectful_json=self.registry.effectful_names_json(),
            namespaces_json=self.registry.namespaces_json(),
            inline_json=self.inline_json,
        )
        host = HostCalls(self.registry, self.context, self.limits, self.calls, self.gate)
        calls = self.calls
        self.guest = GuestRun(
            spec, self.channel, host, strip_typescript, lambda: calls.any_effects, self.on_output
        )

    @property
    def printed_chars(self) -> int:
        """Characters the program has printed so far (any thread; progress reports)."""
        return self.guest.printed_chars

    @property
    def tool_calls(self) -> int:
        """Tool calls the program has started so far (read from any thread)."""
        return self.calls.tool_calls

    @property
    def _watch(self) -> Watch | None:
        return self.guest.watch

    def run(self, ctx: _qjs.Context) -> ProgramOutcome:
        """Run the program from its start on a fresh context, on this (a worker) thread. Never raises."""
        return outcome_of(self.guest.run(ctx), self.calls)

    def first_stretch(self, ctx: _qjs.Context) -> ProgramOutcome | str:
        """Its first stretch on the event loop's thread (`GuestRun.first_stretch`)."""
        end = self.guest.first_stretch(ctx)
        return outcome_of(end, self.calls) if isinstance(end, GuestEnd) else end

    def resume(self, ctx: _qjs.Context) -> ProgramOutcome:
        """Go on with a program whose first stretch waited, on this (a worker) thread. Never raises."""
        return outcome_of(self.guest.resume(ctx), self.calls)

    def cancel(self) -> None:
        """Stop the program as soon as possible, also in the middle of computing (any thread)."""
        self.guest.cancel()
