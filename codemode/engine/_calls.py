"""The event loop's side of one program's tool calls (`LoopCalls`): what the program posts is
checked once, asked about (the gate, in batches), run at most ``tool_concurrency`` at once, and
its result's JSON posted back, through the program's channel: a `_qjs.Channel` in thread mode,
the host's end of a worker's control socket in process mode."""

from __future__ import annotations

import collections
from collections.abc import Collection, Sequence
from typing import Any, Protocol

import anyio.to_thread

from codemode._trace import current
from codemode.engine._bridge import failure_json, parse_call, result_payload
from codemode.engine._loop import LoopSpawner
from codemode.engine._outcome import CallGate, EngineLimits, ProgramCalls
from codemode.engine._text import _from_js_json
from codemode.errors import ErrorCode, ToolError
from codemode.tools import Tool, ToolContext, ToolFailure, ToolRegistry, ToolResult, failure_of


class CallChannel(Protocol):
    """What `LoopCalls` needs of a program's channel: a `_qjs.Channel` (thread mode), or the host's
    end of a worker process's control socket (`_RemoteChannel`)."""

    def take_calls(self) -> list[tuple[int, str, str, int]]: ...
    def post(self, call_id: int, ok: bool, payload: str, is_text: bool, /) -> None: ...
    @property
    def unread(self) -> int: ...


# A call admitted to run: its id, tool, parsed arguments.
_Admitted = tuple[int, Tool, Any]


class LoopCalls:
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
        channel: CallChannel,
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
        self.trace = current()  # the program's span, when it is traced: its calls' spans nest under it
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
        trace = self.trace
        if tool.inline:
            try:
                if trace is None:
                    value = self.registry.invoke_inline(tool, args, self.context)
                else:
                    value = self.registry.invoke_inline(
                        tool, args, self.context, trace=trace, call_id=self._span_id(call_id)
                    )
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
                if trace is None:
                    value = await self.registry.invoke_raw(tool, args, self.context)
                else:
                    value = await self.registry.invoke_raw(
                        tool, args, self.context, trace=trace, call_id=self._span_id(call_id)
                    )
            except Exception as exc:  # invoke_raw maps handler errors; this is a last resort
                value = ToolResult.failed(failure_of(exc, tool.name))
            finally:
                self._ran()  # (stopped when the program ended: it stays pending, reported as cancelled)
            self._deliver(call_id, tool, value)

        self.spawner.run_now(job, self._ran)  # refused: the program has ended (reported as cancelled)

    def _span_id(self, call_id: int) -> str:
        """A call's ``gen_ai.tool.call.id``: its program's call id, then its number there."""
        return f"{self.context.call_id}.{call_id}"

    @property
    def pending_ids(self) -> Collection[int]:
        """The ids of the calls posted and not answered (a worker process's posts are checked
        against them)."""
        return self._pending.keys()

    def pending_names(self) -> list[tuple[int, str]]:
        """The calls posted and not answered: (call id, tool name)."""
        return [(call_id, name) for call_id, (name, _) in self._pending.items()]

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
