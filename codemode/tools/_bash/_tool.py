"""The ``bash`` tool: its arguments (one flat model, clear JSON Schema), its results, guidance text."""

from __future__ import annotations

from typing import Any, Literal

import pydantic
import pydantic_core

from codemode.tools._bash._results import BashResult
from codemode.tools._model import Handler, Tool, make_tool

MAX_TIMEOUT_SECONDS = 3600
DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_READ_BYTES = 32768
MAX_READ_BYTES = 1 << 20
MAX_WAIT_MS = 300_000

Action = Literal["run", "read", "write", "stop", "list", "update"]

# Which fields each action takes (besides ``action``); anything else is a mistake worth naming.
_FIELDS_BY_ACTION: dict[str, frozenset[str]] = {
    "run": frozenset(
        {
            "command",
            "timeout_seconds",
            "cwd",
            "run_in_background",
            "completion_mode",
            "lifecycle",
            "purpose",
            "scope",
        }
    ),
    "read": frozenset({"process_id", "offset_bytes", "max_bytes", "wait_ms"}),
    "write": frozenset({"process_id", "input"}),
    "stop": frozenset({"process_id"}),
    "list": frozenset(),
    "update": frozenset({"process_id", "completion_mode"}),
}
_REQUIRED_BY_ACTION: dict[str, tuple[str, ...]] = {
    "run": ("command",),
    "read": ("process_id",),
    "write": ("process_id", "input"),
    "stop": ("process_id",),
    "list": (),
    "update": ("process_id", "completion_mode"),
}


class BashArgs(pydantic.BaseModel):
    """Arguments of the ``bash`` tool."""

    model_config = pydantic.ConfigDict(extra="forbid")

    action: Action = pydantic.Field(
        default="run",
        description=(
            "run (default) a command; read / write / stop a background process; list this session's "
            "processes; update a process's completion_mode."
        ),
    )
    command: str | None = pydantic.Field(
        default=None, min_length=1, description="run: the bash command line (a new shell each call)."
    )
    timeout_seconds: int | None = pydantic.Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description=(
            f"run: stop a foreground command after this long (default {DEFAULT_TIMEOUT_SECONDS}); background "
            "processes run until they exit or are stopped."
        ),
    )
    cwd: str | None = pydantic.Field(
        default=None, description="run: working directory, relative to the workspace root (default)."
    )
    run_in_background: bool | None = pydantic.Field(
        default=None, description="run: start in the background and return its process_id at once."
    )
    completion_mode: Literal["resume", "detached"] | None = pydantic.Field(
        default=None,
        description="run/update: resume (default) notifies this session when it exits; detached does not.",
    )
    lifecycle: Literal["session", "managed"] | None = pydantic.Field(
        default=None,
        description="run: session (default) stops it when the session closes; managed only by stop.",
    )
    purpose: str | None = pydantic.Field(default=None, description="run: why (kept in the audit record).")
    scope: Literal["targeted", "affected", "full"] | None = pydantic.Field(
        default=None, description="run: how much a verification command covers (recorded only)."
    )
    process_id: str | None = pydantic.Field(
        default=None, min_length=1, description="read/write/stop/update: the id run returned."
    )
    offset_bytes: int | None = pydantic.Field(
        default=None, ge=0, description="read: where to start (the last next_offset; default 0)."
    )
    max_bytes: int | None = pydantic.Field(
        default=None,
        ge=1,
        le=MAX_READ_BYTES,
        description=f"read: at most this much (default {DEFAULT_READ_BYTES}).",
    )
    wait_ms: int | None = pydantic.Field(
        default=None,
        ge=0,
        le=MAX_WAIT_MS,
        description="read: wait up to this long for new output or exit (default: return at once).",
    )
    input: str | None = pydantic.Field(default=None, description="write: text sent to the process's stdin.")

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON Schema, with optional fields shown as their plain type (no ``null``)."""
        schema = super().model_json_schema(*args, **kwargs)
        for prop in schema.get("properties", {}).values():
            options = prop.pop("anyOf", None)
            if options is not None:
                kept = [o for o in options if o.get("type") != "null"]
                if len(kept) == 1:
                    prop.update(kept[0])
                else:
                    prop["anyOf"] = kept
                if prop.get("default", 0) is None:
                    del prop["default"]
        return schema

    @pydantic.model_validator(mode="after")
    def _fits_action(self) -> BashArgs:
        """The fields given must fit the action: part of validating the arguments, so a
        mistake is reported like any other (code ``invalid_arguments``, path ``$``)."""
        given = {
            name for name in type(self).model_fields if name != "action" and getattr(self, name) is not None
        }
        missing = [name for name in _REQUIRED_BY_ACTION[self.action] if getattr(self, name) is None]
        if missing:
            raise pydantic_core.PydanticCustomError(
                "arguments_for_action",
                'bash action "{action}" needs {missing}',
                {"action": self.action, "missing": ", ".join(missing)},
            )
        extra = sorted(given - _FIELDS_BY_ACTION[self.action])
        if extra:
            allowed = ", ".join(sorted(_FIELDS_BY_ACTION[self.action])) or "nothing else"
            raise pydantic_core.PydanticCustomError(
                "arguments_for_action",
                'bash action "{action}" does not take {extra} (it takes {allowed})',
                {"action": self.action, "extra": ", ".join(extra), "allowed": allowed},
            )
        return self


def bash_tool(handler: Handler, handoff_seconds: float | None) -> Tool:
    """The ``bash`` tool around the process manager's handler: arguments, results, annotations."""
    return make_tool(
        handler,
        name="bash",
        title="Bash",
        description=description(handoff_seconds),
        input_model=BashArgs,
        result_model=BashResult,
        destructive=True,
    )


def _handoff_words(handoff_seconds: float | None) -> str:
    if handoff_seconds is None:
        return "Commands run to their timeout (default 300 s), then their whole process tree is stopped."
    return (
        f"Commands still running after {handoff_seconds:g} s move to the background (same process) and "
        "return a promoted_process_id."
    )


def description(handoff_seconds: float | None) -> str:
    """The tool description, for the model."""
    return (
        "Run a bash command (a new non-interactive shell each call: cd and exports do not carry over; "
        "stdin is closed). Returns what a terminal shows: stdout then stderr, long output cut to head "
        f"and tail with the full log in the archive. {_handoff_words(handoff_seconds)} Background "
        "processes (run_in_background): action read (wait_ms waits for output), write, stop, list, update."
    )


def guidance(handoff_seconds: float | None) -> str:
    """The text the bash tool adds to the run_code description."""
    return "\n".join(
        [
            "### bash",
            '- `await tools.bash({command: "pytest -q", cwd: "sub/dir", timeout_seconds: 600})` runs a command '
            "in a new shell (no cd/export carries over; stdin closed). Result: `exit_code`, `stdout.excerpt`, "
            "`stderr.excerpt`, `verification` (parsed test/lint summaries), `log.ref` (full output: "
            "`read_archive`).",
            f"- {_handoff_words(handoff_seconds)} Start long commands with `run_in_background: true` "
            "(returns `process_id` at once).",
            '- `bash({action: "read", process_id, offset_bytes: next_offset, wait_ms: 5000})` waits for new '
            'output or exit; `bash({action: "write", process_id, input})` types into its terminal '
            '("\\u0003" is Ctrl-C); `bash({action: "stop", process_id})`; `bash({action: "list"})`.',
            "- Process ids are opaque and belong to this session; keep one in `store` to use it in a later "
            "program.",
        ]
    )
