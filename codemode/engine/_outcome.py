"""What one program's run is given and gives back, and what its threads share: its limits
(`EngineLimits`), its failure (`GuestError`), its outcome (`ProgramOutcome`), its calls'
bookkeeping (`ProgramCalls`) and the approvals' face the engine sees (`CallGate`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from codemode.engine._guest import EngineLimits, GuestEnd, GuestError
from codemode.tools import Tool, ToolResult, to_tool_result

__all__ = [
    "CallGate",
    "EngineLimits",
    "GuestError",
    "ProgramCalls",
    "ProgramOutcome",
    "as_result",
    "outcome_of",
]

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
    images: list[tuple[str, str]] = field(default_factory=list)
    """The images the program showed (``image(data, mimeType)``), in order: (mime type, base64),
    checked by the prelude (type table, magic bytes, size and count caps)."""


class ProgramCalls:
    """What one program's two threads share about its calls.

    Each attribute is written by one thread (named), or, for `note_effect`, by one dict or set
    operation at a time, which the GIL keeps whole.
    """

    def __init__(self) -> None:
        self.inline_calls = 0  # calls answered on the program's thread (its own)
        self.loop_calls = 0  # calls checked on the event loop (the loop's)
        self.args_held = 0  # JSON characters of the arguments of the calls the loop holds (the loop's)
        # Calls of tools that change something: the ids delivered, and the first results, for
        # the report of calls the program never looked at (ProgramThread._unawaited).
        self._effects_delivered: set[int] = set()
        self._effects_kept: dict[int, tuple[str, Any]] = {}

    @property
    def tool_calls(self) -> int:
        """Calls started so far (read from any thread)."""
        return self.inline_calls + self.loop_calls

    @property
    def any_effects(self) -> bool:
        """Whether any call of a tool that changes things has delivered its result."""
        return bool(self._effects_delivered)

    def note_effect(self, call_id: int, tool_name: str, value: Any) -> None:
        """A call of a tool that declares it changes things (destructive) delivered ``value``."""
        self._effects_delivered.add(call_id)
        if len(self._effects_kept) < _UNAWAITED_KEPT:
            self._effects_kept[call_id] = (tool_name, value)

    def unawaited(self, ids: Sequence[int]) -> tuple[list[tuple[str, ToolResult]], int]:
        """What the calls ``ids`` (settled, never looked at) did, and how many more there were."""
        kept = [self._effects_kept[i] for i in ids if i in self._effects_kept]
        more = sum(1 for i in ids if i in self._effects_delivered and i not in self._effects_kept)
        return [(name, as_result(value)) for name, value in kept], more


class CallGate(Protocol):
    """What a call must pass before it runs (the host's approvals, ``codemode.policy``).

    ``requests`` is asked for each call as the program makes it (on the program's thread for
    an inline tool, else on the event loop; in a worker thread when `reads_files` says it may
    read a file a command wrote, which nothing does on the loop); calls that need a decision
    are held and go to ``decide`` in batches. When `batches` is true, the program hands its calls to the loop
    only when it waits, so those it started together (``Promise.all``) are one batch.
    """

    @property
    def batches(self) -> bool:
        """Whether someone is asked (an approval callback), who should see calls made together at once."""
        ...

    def reads_files(self, tool: Tool, arguments: Mapping[str, Any]) -> bool:
        """Whether `requests` for this call may read files (the command policy reading a
        script): then it is not called on the event loop. Cheap, reads nothing."""
        ...

    def requests(self, tool: Tool, arguments: Mapping[str, Any], session_id: str) -> Sequence[Any] | str:
        """What this call needs decided (empty: it runs), or why it is refused outright."""
        ...

    async def decide(self, requests: list[Any]) -> Sequence[Any]:
        """One decision per request, in order."""
        ...

    def refusal(self, requests: Sequence[Any], decisions: Sequence[Any]) -> str | None:
        """The message for a call one of whose requests was denied, or None."""
        ...


def outcome_of(end: GuestEnd, calls: ProgramCalls) -> ProgramOutcome:
    """The host's outcome of a program whose JavaScript ended as ``end``: what its calls did added."""
    unawaited, more = calls.unawaited(end.unobserved) if end.unobserved else ([], 0)
    return ProgramOutcome(
        output=end.output,
        error=end.error,
        tool_calls=calls.tool_calls,
        cancelled=list(end.pending.values()),
        pending_calls=end.pending,
        cpu_seconds=end.cpu_seconds,
        output_dropped_bytes=end.output_dropped_bytes,
        dropped_timers=end.dropped_timers,
        unawaited=unawaited,
        unawaited_more=more,
        images=end.images,
    )
