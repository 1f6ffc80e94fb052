"""The ``bash`` tool's results, one model per action: their JSON Schema is the tool's output schema.

They describe what ``_shape.build_result`` (a foreground run) and the process manager (the
other actions) return; the registry checks each result against `BashResult`. Fields a model
does not name are allowed through (a new field is not an error), a missing or mistyped one is.
"""

from __future__ import annotations

from typing import Literal

import pydantic

from codemode.tools._read_archive import ByteRange

__all__ = [
    "BashList",
    "BashRead",
    "BashResult",
    "BashRun",
    "BashStarted",
    "BashStopped",
    "BashUpdated",
    "BashWaited",
    "BashWritten",
    "ProcessInfo",
]

State = Literal["starting", "running", "exited", "stopped", "failed", "lost"]
Lifecycle = Literal["session", "managed"]
CompletionMode = Literal["resume", "detached"]
Scope = Literal["targeted", "affected", "full"]
VerificationKind = Literal["test", "build", "lint", "typecheck"]


class Stream(pydantic.BaseModel):
    """One output stream of a run."""

    excerpt: str
    bytes: int
    truncated: bool


class Classification(pydantic.BaseModel):
    """What a command verifies."""

    kind: VerificationKind
    tool: str


class Verification(pydantic.BaseModel):
    """A verification command's outcome, read from the runner's own summary."""

    kind: VerificationKind
    tool: str
    ok: bool | None
    passed: int | None
    failed: int | None
    skipped: int | None
    errors: int | None
    summary_line: str | None
    complete: bool = pydantic.Field(
        default=True, description="false: the counts add up lines of a cut output and cover only `covers`"
    )
    covers: str | None = None
    failing_tests: list[str] = pydantic.Field(default_factory=list, description="the first 20 failing tests")
    more_failing_tests: int = 0


class WorkspaceRevision(pydantic.BaseModel):
    """The git revision of the work tree the command ran in."""

    root: str
    head: str | None
    ref: str | None
    dirty: bool | None
    dirty_reason: str | None


class Log(pydantic.BaseModel):
    """The run's full log in the archive."""

    ref: str | None = pydantic.Field(description="read_archive reads it; null when there was no output.")
    sha256: str | None
    bytes: int | None
    kept_bytes: int | None = None
    dropped: ByteRange | None = None


class BashRun(pydantic.BaseModel):
    """action run: a foreground command that finished (or moved to the background)."""

    exit_code: int | None = pydantic.Field(description="-1 when moved to the background")
    timed_out: bool
    duration_ms: int
    stdout: Stream
    stderr: Stream
    classification: Classification | None
    verification: Verification | None
    workspace_revision: WorkspaceRevision | None
    log: Log
    cwd: str
    purpose: str | None
    scope: Scope | None
    signal: str | None = None
    cancelled: bool | None = None
    promoted_process_id: str | None = pydantic.Field(default=None, description="when moved to the background")
    next_offset: int | None = None


class StartedLog(pydantic.BaseModel):
    """A background process's log."""

    ref: str


class BashStarted(pydantic.BaseModel):
    """action run with run_in_background: the process started."""

    process_id: str
    state: Literal["running"]
    pid: int
    command: str
    cwd: str
    lifecycle: Lifecycle
    completion_mode: CompletionMode
    log: StartedLog
    purpose: str | None
    scope: Scope | None


class BashRead(pydantic.BaseModel):
    """action read: a page of a background process's output."""

    process_id: str
    output: str
    offset: int
    next_offset: int
    total_bytes: int
    eof: bool
    exited: bool
    exit_code: int | None
    state: State
    note: str | None = None
    verification: Verification | None = None


class BashWaited(pydantic.BaseModel):
    """action wait: why the wait ended."""

    process_id: str
    kind: Literal["background", "promoted", "watcher"]
    reason: Literal["exit", "pattern", "timeout"]
    line: str | None = pydantic.Field(
        description="the matching line (pattern), or a watcher's last event (exit)"
    )
    next_offset: int = pydantic.Field(
        description="offset_bytes to go on from (a watcher's: the event number)"
    )
    exited: bool
    exit_code: int | None
    state: State
    waited_ms: int
    pattern: str | None = None
    verification: Verification | None = None


class BashWritten(pydantic.BaseModel):
    """action write: the input was sent."""

    process_id: str
    bytes: int


class BashStopped(pydantic.BaseModel):
    """action stop."""

    message: str
    process_id: str
    state: State
    exit_code: int | None


class ProcessInfo(pydantic.BaseModel):
    """One of the session's background processes."""

    process_id: str
    session_id: str
    command: str
    state: State
    kind: Literal["background", "promoted", "watcher"]
    started: str | None
    ended: str | None
    exit_code: int | None
    exit_signal: str | None
    lifecycle: Lifecycle
    completion_mode: CompletionMode
    log_bytes: int | None
    log_ref: str | None
    purpose: str | None


class BashList(pydantic.BaseModel):
    """action list."""

    processes: list[ProcessInfo]


class BashUpdated(pydantic.BaseModel):
    """action update."""

    message: str
    process_id: str
    completion_mode: CompletionMode


BashResult = (
    BashRun | BashStarted | BashRead | BashWaited | BashWritten | BashStopped | BashList | BashUpdated
)
"""What ``bash`` returns, by action: run (finished or moved to the background, or started in
the background), read, write, stop, list, update."""
