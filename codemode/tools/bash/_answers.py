"""The process manager's answers as the dicts its callers read (the ``bash`` handler, the
monitor's tools, the CLI): one TypedDict per answer.

They are the Python side of `_results`' models (which give the tool its output schema): the
manager builds these dicts, the registry checks the JSON against the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:  # the verification parsers load on first use (cold start)
    from codemode.tools._verification import VerificationData

__all__ = [
    "EventData",
    "EventsAnswer",
    "ProcessRow",
    "ReadAnswer",
    "StartedAnswer",
    "StoppedAnswer",
    "SupervisorAnswer",
    "UpdatedAnswer",
    "WaitAnswer",
    "WatcherData",
    "WrittenAnswer",
]


class ReadAnswer(TypedDict):
    """``read``: a page of a process's output (`_results.BashRead`)."""

    process_id: str
    output: str
    offset: int
    next_offset: int
    total_bytes: int
    eof: bool
    exited: bool
    exit_code: int | None
    state: str
    note: NotRequired[str]
    verification: NotRequired[VerificationData | None]


class WaitAnswer(TypedDict):
    """``wait``: why the wait ended (`_results.BashWaited`)."""

    process_id: str
    kind: str
    reason: str
    line: str | None
    next_offset: int
    exited: bool
    exit_code: int | None
    state: str
    waited_ms: NotRequired[int]
    pattern: NotRequired[str]
    verification: NotRequired[VerificationData | None]


class WrittenAnswer(TypedDict):
    """``write`` (`_results.BashWritten`)."""

    process_id: str
    bytes: int


class StoppedAnswer(TypedDict):
    """``stop`` (`_results.BashStopped`)."""

    message: str
    process_id: str
    state: str
    exit_code: int | None


class UpdatedAnswer(TypedDict):
    """``update`` (`_results.BashUpdated`)."""

    message: str
    process_id: str
    completion_mode: str


class StartedLogData(TypedDict):
    """A started process's log."""

    ref: str


class StartedAnswer(TypedDict):
    """``run`` with ``run_in_background`` (`_results.BashStarted`)."""

    process_id: str
    state: str
    pid: int
    command: str
    cwd: str
    lifecycle: str
    completion_mode: str
    log: StartedLogData
    purpose: str | None
    scope: str | None


class ProcessRow(TypedDict):
    """One process of ``list`` (`_results.ProcessInfo`)."""

    process_id: str
    session_id: str
    command: str
    state: str
    kind: str
    started: str | None
    ended: str | None
    exit_code: int | None
    exit_signal: str | None
    lifecycle: str
    completion_mode: str
    log_bytes: int | None
    log_ref: str | None
    purpose: str | None


class WatcherData(TypedDict):
    """One Monitor watcher, described."""

    watcher_id: str
    description: str | None
    command: str
    state: str
    started: str | None
    ended: str | None
    exit_code: int | None
    events: int
    options: dict[str, object]
    log_ref: str | None


class EventData(TypedDict):
    """One event of a watcher."""

    seq: int
    text: str
    lines: list[str]
    suppressed: int
    final: bool
    at: str | None


class EventsAnswer(TypedDict):
    """A watcher's events read."""

    watcher_id: str
    events: list[EventData]
    next_after: int
    state: str
    exit_code: int | None


class SupervisorAnswer(TypedDict, total=False):
    """A supervisor's one-line JSON answer to its spec: ``ok`` and the command's ``pid`` and
    ``pid_started``, or ``error``; the host adds the log's ``log_ref`` to a started one, and the
    list its proxy appends each refused connection to (``network_refusals``, while it runs)."""

    ok: bool
    pid: int
    pid_started: int  # clock ticks since boot (`codemode.sandbox.process_start`)
    error: str
    log_ref: str
    network_refusals: list[str] | None  # with an allowlist: what the host's proxy refused it
