"""The exceptions codemode raises, and the codes of the errors a model can act on, in one place.

```
CodemodeError
├── UserError              the embedding developer used the API wrongly (bad config,
│                          duplicate tool, sync call inside a running event loop, ...)
├── ToolError              a tool refused or failed in a way the model caused; the
│   │                      registry turns it into an error result the model can read
│   ├── UnknownRefError    read_archive / logs with a reference that does not exist
│   ├── SandboxDenied      a path or action outside the sandbox policy
│   └── ProcessNotFound    no such process in this session
└── HostFault              the host itself cannot work (state directory, sandbox
    ├── StateDirError      enforcement, engine); never the model's fault
    └── SandboxUnavailable
```

Every `ToolError` carries an `ErrorCode`: a required ``code=`` argument, or its class for the
three subclasses that stand for one code. A program (``e.code``), an MCP client (the error
result's ``structuredContent.code``) and Python (`CallResult.code`) branch on it without reading
the message; ``data`` holds details, never the code. One function turns an exception into the
failure a model sees (`codemode.tools.failure_of`); `tests/test_error_map.py` holds both rules. Guest outcomes (JS errors, timeouts, memory limits) are
*data* in a `RunResult`, never exceptions; their kinds are `GuestErrorKind`. A `ToolError`
raised inside a handler becomes a rejected promise in JS and an error result for a direct call.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "CodemodeError",
    "ErrorCode",
    "GuestErrorKind",
    "HostFault",
    "ProcessNotFound",
    "SandboxDenied",
    "SandboxUnavailable",
    "StateDirError",
    "ToolError",
    "UnknownRefError",
    "UserError",
]


class ErrorCode(enum.StrEnum):
    """Why a tool call failed: the ``code`` of every `ToolError`.

    A program reads it from the rejected promise, an MCP client from the error result. Codes
    are stable; messages are for reading and may change.
    """

    # -- the call itself (the registry and the engine) --
    UNKNOWN_TOOL = "unknown_tool"
    """No tool has this name; the message names close matches."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The arguments do not fit the tool's schema; ``data`` has the JSON ``path`` and the ``message``."""
    INVALID_RESULT = "invalid_result"
    """The tool returned a result that does not match its declared result type (a bug in the tool)."""
    RESULT_NOT_JSON = "result_not_json"
    """The tool returned data JSON cannot carry (a bug in the tool)."""
    TOOL_DATA_LIMIT = "tool_data_limit"
    """The call's arguments or result would take the program over its tool-call data limit."""
    HANDLER_FAILED = "handler_failed"
    """The tool raised an unexpected exception (a bug in the tool); ``data.detail`` names it."""
    CANCELLED = "cancelled"
    """The call was stopped before it finished (its program ended or was cancelled)."""
    TOOL_FAILED = "tool_failed"
    """The tool refused or failed and gave no more specific code (the message says why)."""

    # -- policy --
    DENIED = "denied"
    """The call was refused by an approval decision (the message carries the reason) or its
    tool's permission is deny."""
    DENIED_BY_POLICY = "denied_by_policy"
    """The host's command policy refuses this command: a denied executable (``data.executable``),
    or, under the strict policy, a construct it cannot check (``data.construct``)."""
    WATCHER_IN_FOREGROUND = "watcher_in_foreground"
    """The command watches for changes and never ends by itself: start it with
    ``run_in_background: true``."""
    REDACTED_VALUE = "redacted_value"
    """An argument holds a ``[REDACTED:…]`` marker: the redactor masked that value, so it cannot
    be passed back; read the secret inside the same command instead."""

    # -- sandbox --
    DENIED_BY_SANDBOX = "denied_by_sandbox"
    """The sandbox policy does not allow this path or action."""
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    """Confinement is required but cannot be applied here, so the command was refused."""

    # -- archive --
    UNKNOWN_REF = "unknown_ref"
    """No archived text with this reference in this session (or it expired)."""

    # -- files --
    NOT_FOUND = "not_found"
    """The file (or a directory on its path) does not exist; ``data.similar`` lists close names."""
    NOT_A_FILE = "not_a_file"
    """The path is a directory, device, FIFO, socket or kernel pseudo-file."""
    BINARY_FILE = "binary_file"
    """The file is binary or in an encoding the file tools do not handle."""
    TOO_LARGE = "too_large"
    """The file is larger than the tool handles."""
    OUT_OF_RANGE = "out_of_range"
    """An offset lies past the end."""
    NO_MATCH = "no_match"
    """edit_file: ``old_text`` is not in the file; ``data.near_miss`` is the closest region."""
    MULTIPLE_MATCHES = "multiple_matches"
    """edit_file: ``old_text`` occurs more than once and ``replace_all`` is not set."""
    NO_CHANGE = "no_change"
    """edit_file: the edit would change nothing."""
    ALREADY_EXISTS = "already_exists"
    """write_file with ``create_only``: the file exists."""
    OVERWRITE_REQUIRED = "overwrite_required"
    """write_file: replacing this large file needs ``overwrite: true``."""
    UNENCODABLE = "unencodable"
    """The text cannot be written in the file's encoding (or holds an unpaired surrogate)."""
    CHANGED_MEANWHILE = "changed_meanwhile"
    """The file changed while it was being read or written; nothing was changed: try again."""
    OS_ERROR = "os_error"
    """The file system refused (permission, no space, read-only, ...); ``data.errno`` names it."""

    # -- bash --
    BAD_COMMAND = "bad_command"
    """The command line cannot be run as given (it holds a NUL character)."""
    BAD_CWD = "bad_cwd"
    """The working directory does not exist, is not a directory, or is outside the roots."""
    SPAWN_FAILED = "spawn_failed"
    """The command could not be started."""
    SUPERVISOR_FAILED = "supervisor_failed"
    """The background supervisor could not be started."""
    BACKGROUND_CAP = "background_cap"
    """The session already runs its maximum of background processes."""
    TEMP_DIR_FULL = "temp_dir_full"
    """The session's ``$TMPDIR`` holds more than its share of the disk quota: remove files there."""
    NO_SUCH_PROCESS = "no_such_process"
    """No process with this id in this session."""
    EXITED = "exited"
    """The process has ended and takes no more input."""
    NO_INPUT = "no_input"
    """The process was started with stdin closed and takes no input."""
    INPUT_BLOCKED = "input_blocked"
    """The process is not reading its input."""
    TAKEN_OVER = "taken_over"
    """A person has taken the process's terminal over (the console): its input is theirs."""
    PID_REUSED = "pid_reused"
    """The recorded pid belongs to another process now; nothing was signalled."""
    BAD_PATTERN = "bad_pattern"
    """A wait's ``until.pattern`` is not a valid regular expression."""

    # -- monitor --
    WATCHER_CAP = "watcher_cap"
    """The session already runs its maximum of Monitor watchers."""
    NO_SUCH_WATCHER = "no_such_watcher"
    """No watcher with this id in this session."""

    # -- upstream MCP servers --
    UPSTREAM_ERROR = "upstream_error"
    """An upstream MCP server reported the call failed (``isError``, or a protocol error); the
    message carries the server's text."""
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    """An upstream MCP server cannot be started or reached, or stopped during the call."""
    UPSTREAM_TIMEOUT = "upstream_timeout"
    """An upstream MCP tool did not answer within the server's timeout (it was cancelled upstream)."""


class GuestErrorKind(enum.StrEnum):
    """How a program failed: the ``kind`` of a run's error."""

    OPTIONS = "options"
    """The ``// @run_code:`` header is invalid; nothing ran."""
    SYNTAX_ERROR = "syntax_error"
    """The program does not parse."""
    UNCAUGHT = "uncaught"
    """The program threw (or a tool call it awaited rejected) and did not catch it."""
    TIMEOUT = "timeout"
    """The program ran past its wall-clock limit."""
    CPU_LIMIT = "cpu_limit"
    """The program used up its JS CPU time."""
    OUT_OF_MEMORY = "out_of_memory"
    """The program exceeded its memory limit."""
    STACK_OVERFLOW = "stack_overflow"
    """The program recursed too deeply."""
    DEADLOCK = "deadlock"
    """The program awaits a promise nothing can settle."""
    CANCELLED = "cancelled"
    """The host cancelled the run."""
    INTERNAL = "internal"
    """The engine failed (a host fault, not the program's)."""


class CodemodeError(Exception):
    """Base class of every exception codemode raises."""


class UserError(CodemodeError):
    """The embedding developer used the API in a way it does not support."""


class ToolError(CodemodeError):
    """A failure the model can act on, raised by a tool handler.

    Args:
        message: What went wrong and what to do instead, in one or two sentences.
        data: Optional JSON-compatible details (candidates, paths, limits); never the code.
        code: What kind of failure it is (`TOOL_FAILED` when no more specific code fits).
    """

    def __init__(self, message: str, data: Any = None, *, code: ErrorCode) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        self.code = ErrorCode(code)


class UnknownRefError(ToolError):
    """An archive reference that the archive does not hold (code ``unknown_ref``: the class is the code)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message, data, code=ErrorCode.UNKNOWN_REF)


class SandboxDenied(ToolError):
    """The sandbox policy does not allow this path or action (code ``denied_by_sandbox``)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message, data, code=ErrorCode.DENIED_BY_SANDBOX)


class ProcessNotFound(ToolError):
    """No process with this id belongs to the calling session (code ``no_such_process``)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message, data, code=ErrorCode.NO_SUCH_PROCESS)


class HostFault(CodemodeError):
    """The host cannot do its job; the cause is not the model's input."""


class StateDirError(HostFault):
    """The state directory cannot be created, secured or opened."""


class SandboxUnavailable(HostFault):
    """Confinement was asked for but cannot be enforced on this machine."""
