"""The ``bash`` tool: its arguments (one model per action, told apart by ``action``), its results,
guidance text."""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal, get_args

import pydantic
import pydantic_core

from codemode._json import JsonObject
from codemode.network import MAX_ENTRIES, check_entries
from codemode.tools._model import Handler, Tool, ToolContext, ToolResult, make_tool
from codemode.tools.bash._limits import (
    DEFAULT_READ_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_WAIT_MS,
    MAX_READ_BYTES,
    MAX_REPORT_KEYWORDS,
    MAX_TIMEOUT_SECONDS,
    MAX_WAIT_MS,
)
from codemode.tools.bash._results import BashResult

Action = Literal["run", "read", "write", "stop", "list", "update", "wait"]
CompletionMode = Literal["resume", "detached"]


class _ActionArgs(pydantic.BaseModel):
    """The arguments of one bash action: the fields of another action are named as such."""

    model_config = pydantic.ConfigDict(extra="forbid")

    action: Action

    @pydantic.model_validator(mode="before")
    @classmethod
    def _fits_action(cls, data: Any) -> Any:
        """A null means absent; a required field missing, or a field of another action given, is
        reported with what this action takes (code ``invalid_arguments``, path ``$``). Unknown
        fields are left to ``extra="forbid"``."""
        if not isinstance(data, dict):
            return data
        data = {key: value for key, value in data.items() if value is not None}
        action = data.get("action", "run")
        if action != _action_of_model(cls):
            return data  # the action's own literal rejects it
        fields = _FIELDS_BY_ACTION[action]
        missing = [name for name in _REQUIRED_BY_ACTION[action] if name not in data]
        if missing:
            raise pydantic_core.PydanticCustomError(
                "arguments_for_action",
                'bash action "{action}" needs {missing}',
                {"action": action, "missing": ", ".join(missing)},
            )
        extra = sorted(name for name in data if name in _ALL_FIELDS and name not in fields)
        if extra:
            allowed = ", ".join(sorted(fields)) or "nothing else"
            raise pydantic_core.PydanticCustomError(
                "arguments_for_action",
                'bash action "{action}" does not take {extra} (it takes {allowed})',
                {"action": action, "extra": ", ".join(extra), "allowed": allowed},
            )
        return data


# What the model reads of `network` (a model of its own would cost a `$defs` entry, ~60 tokens
# more on every listing: bench/bench_tokens.py); the field is still checked as NetworkAllow | bool.
_NETWORK_SCHEMA = {
    "description": "true: needs network (asks where off); {allow: [domains]}: only those.",
    "anyOf": [
        {"type": "boolean"},
        {
            "type": "object",
            "properties": {"allow": {"type": "array", "items": {"type": "string"}}},
            "required": ["allow"],
        },
    ],
}


class NetworkAllow(pydantic.BaseModel):
    """A run's network as an allowlist: only these domains, through the host's proxy."""

    model_config = pydantic.ConfigDict(extra="forbid")

    allow: list[str] = pydantic.Field(max_length=MAX_ENTRIES)

    @pydantic.field_validator("allow")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        try:
            return list(check_entries(value))
        except ValueError as exc:
            raise pydantic_core.PydanticCustomError("network_allow", str(exc)) from None


class BashRunArgs(_ActionArgs):
    """Run a command (the default action)."""

    action: Literal["run"] = "run"
    command: str | None = pydantic.Field(default=None, min_length=1, description="bash command line.")
    argv: list[str] | None = pydantic.Field(
        default=None,
        min_length=1,
        description="program and arguments, no shell; instead of command.",
    )
    timeout_seconds: int | None = pydantic.Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description=f"stop after this long (default {DEFAULT_TIMEOUT_SECONDS}; background: none).",
    )
    cwd: str | None = pydantic.Field(default=None, description="working directory (default: workspace root).")
    run_in_background: bool | None = pydantic.Field(default=None, description="returns process_id at once.")
    completion_mode: CompletionMode | None = pydantic.Field(
        default=None, description="resume (default): tell this session when it exits; detached: do not."
    )
    lifecycle: Literal["session", "managed"] | None = pydantic.Field(
        default=None, description="session (default): stopped with the session; managed: only by stop."
    )
    purpose: str | None = pydantic.Field(default=None, description="why (audit record).")
    scope: Literal["targeted", "affected", "full"] | None = pydantic.Field(
        default=None, description="what a verification command covers (recorded)."
    )
    report_on: Annotated[
        list[Annotated[str, pydantic.Field(min_length=1, max_length=100)]] | None,
        pydantic.WithJsonSchema(
            {
                "description": "background: report lines with these words (default error, fail, panic...; [] none).",
                "type": "array",
                "items": {"type": "string"},
            }
        ),  # (its bounds are checked, not listed: ~15 tokens on every listing)
    ] = pydantic.Field(default=None, max_length=MAX_REPORT_KEYWORDS)
    network: Annotated[NetworkAllow | bool | None, pydantic.WithJsonSchema(_NETWORK_SCHEMA)] = pydantic.Field(
        default=None
    )
    write_paths: list[str] | None = pydantic.Field(
        default=None,
        max_length=16,
        description="extra writable directories (asks).",
    )
    sandbox: bool | None = pydantic.Field(
        default=None,
        description="false: unsandboxed (asks each time).",
    )

    @pydantic.model_validator(mode="after")
    def _command_or_argv(self) -> BashRunArgs:
        if (self.command is None) == (self.argv is None):
            raise pydantic_core.PydanticCustomError(
                "arguments_for_action",
                'bash action "run" needs either command (a shell string) or argv (a list, no shell), not '
                + ("both" if self.command is not None else "neither"),
            )
        if self.argv is not None and not self.argv[0]:
            raise pydantic_core.PydanticCustomError("arguments_for_action", "argv[0] (the program) is empty")
        return self

    @property
    def shown(self) -> str:
        """The command line as recorded and shown (argv quoted as a shell would need it)."""
        return self.command if self.command is not None else shlex.join(self.argv or [])


class BashReadArgs(_ActionArgs):
    """Read a page of a background process's output."""

    action: Literal["read"]
    process_id: str = pydantic.Field(min_length=1, description="from run.")
    offset_bytes: int | None = pydantic.Field(
        default=None, ge=0, description="start here (the last next_offset; default 0)."
    )
    max_bytes: int | None = pydantic.Field(
        default=None,
        ge=1,
        le=MAX_READ_BYTES,
        description=f"at most this much (default {DEFAULT_READ_BYTES}).",
    )
    wait_ms: int | None = pydantic.Field(
        default=None,
        ge=0,
        le=MAX_WAIT_MS,
        description="wait this long for output or exit (default 0).",
    )


class BashWriteArgs(_ActionArgs):
    """Send text to a background process's stdin."""

    action: Literal["write"]
    process_id: str = pydantic.Field(min_length=1)
    input: str = pydantic.Field(description="text for its stdin.")


class BashStopArgs(_ActionArgs):
    """Stop a background process (its whole tree)."""

    action: Literal["stop"]
    process_id: str = pydantic.Field(min_length=1)


class BashListArgs(_ActionArgs):
    """List this session's background processes."""

    action: Literal["list"]


class UntilPattern(pydantic.BaseModel):
    """Wait for a new output line matching a regular expression."""

    model_config = pydantic.ConfigDict(extra="forbid")

    pattern: str = pydantic.Field(min_length=1, max_length=1000, description="Python re.")


class BashWaitArgs(_ActionArgs):
    """Wait until a background process exits, or prints a line matching a pattern."""

    action: Literal["wait"]
    process_id: str = pydantic.Field(min_length=1, description="a process or watcher id.")
    until: Literal["exit"] | UntilPattern = pydantic.Field(
        default="exit", description='"exit" (default) or {pattern: regex}.'
    )
    timeout_ms: int = pydantic.Field(
        default=DEFAULT_WAIT_MS,
        ge=0,
        le=MAX_WAIT_MS,
        description=f"give up after (default {DEFAULT_WAIT_MS}).",
    )
    offset_bytes: int | None = pydantic.Field(
        default=None,
        ge=0,
        description="from here (default 0; a watcher: events after this number).",
    )


class BashUpdateArgs(_ActionArgs):
    """Change a background process's completion_mode."""

    action: Literal["update"]
    process_id: str = pydantic.Field(min_length=1)
    completion_mode: CompletionMode


BashActionArgs = (
    BashRunArgs | BashReadArgs | BashWriteArgs | BashStopArgs | BashListArgs | BashUpdateArgs | BashWaitArgs
)
"""One action's arguments."""

_MODELS: dict[str, type[_ActionArgs]] = {
    "run": BashRunArgs,
    "read": BashReadArgs,
    "write": BashWriteArgs,
    "stop": BashStopArgs,
    "list": BashListArgs,
    "update": BashUpdateArgs,
    "wait": BashWaitArgs,
}
# Which fields each action takes and needs (besides ``action``): from the models themselves.
_FIELDS_BY_ACTION: dict[str, frozenset[str]] = {
    action: frozenset(name for name in model.model_fields if name != "action")
    for action, model in _MODELS.items()
}
_REQUIRED_BY_ACTION: dict[str, tuple[str, ...]] = {
    action: tuple(name for name, f in model.model_fields.items() if f.is_required() and name != "action")
    for action, model in _MODELS.items()
}
_ALL_FIELDS = frozenset().union(*_FIELDS_BY_ACTION.values())


def _action_of_model(model: type[_ActionArgs]) -> str:
    return str(get_args(model.model_fields["action"].annotation)[0])


def _action_of(value: Any) -> Any:
    """The discriminator: the ``action`` of JSON arguments (absent or null: run) or of a model."""
    if isinstance(value, dict):
        action = value.get("action")
        return "run" if action is None else action
    return getattr(value, "action", None)


class BashArgs(pydantic.RootModel[BashActionArgs]):
    """Arguments of the ``bash`` tool: one model per action (``root``), told apart by ``action``."""

    root: Annotated[
        Annotated[BashRunArgs, pydantic.Tag("run")]
        | Annotated[BashReadArgs, pydantic.Tag("read")]
        | Annotated[BashWriteArgs, pydantic.Tag("write")]
        | Annotated[BashStopArgs, pydantic.Tag("stop")]
        | Annotated[BashListArgs, pydantic.Tag("list")]
        | Annotated[BashUpdateArgs, pydantic.Tag("update")]
        | Annotated[BashWaitArgs, pydantic.Tag("wait")],
        pydantic.Discriminator(_action_of),
    ]

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _by_action(cls, data: Any, handler: pydantic.ModelWrapValidatorHandler[BashArgs]) -> BashArgs:
        """Validate JSON arguments with their action's model, so problems are reported at their
        own path (``$.wait_ms``, not under the union's tag) and an unknown action at ``$.action``."""
        if not isinstance(data, dict | _ActionArgs | BashArgs):
            raise pydantic_core.ValidationError.from_exception_data(
                cls.__name__, [{"type": "dict_type", "loc": (), "input": data}]
            )
        if isinstance(data, dict):
            action = _action_of(data)
            model = _MODELS.get(action) if isinstance(action, str) else None
            if model is None:
                raise pydantic_core.ValidationError.from_exception_data(
                    cls.__name__,
                    [
                        {
                            "type": "literal_error",
                            "loc": ("action",),
                            "input": action,
                            "ctx": {"expected": ", ".join(repr(a) for a in _MODELS)},
                        }
                    ],
                )
            data = model.model_validate(data)
        return handler(data)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> JsonObject:
        """The JSON Schema: an object that is one of the actions' objects, optional fields shown as
        their plain type (no ``null``)."""
        schema = super().model_json_schema(*args, **kwargs)
        for definition in schema.get("$defs", {}).values():
            for prop in definition.get("properties", {}).values():
                prop.pop("title", None)
                options = prop.pop("anyOf", None)
                if options is not None:
                    kept = [o for o in options if o.get("type") != "null"]
                    if len(kept) == 1:
                        prop.update(kept[0])
                    else:
                        prop["anyOf"] = kept
                    if prop.get("default", 0) is None:
                        del prop["default"]
        schema.pop("description", None)  # the tool's description says it, for the model
        return {"type": "object", **schema}


def bash_tool(handler: Handler, handoff_seconds: float | None, install: str | None = None) -> Tool:
    """The ``bash`` tool around the process manager's handler: arguments, results, annotations.

    ``handler(args, ctx)`` is called through a function annotated here, so the manager's
    module need not import these models to start (`LazyExtension`).
    """

    async def bash(args: BashArgs, ctx: ToolContext) -> ToolResult:
        result: ToolResult = await handler(args, ctx)
        return result

    return make_tool(
        bash,
        name="bash",
        title="Bash",
        description=description(handoff_seconds, install),
        input_model=BashArgs,
        result_model=BashResult,
        destructive=True,
        derive_now=False,  # derived at first use; tests/tools/test_builtin_schemas.py checks it
    )


def _handoff_words(handoff_seconds: float | None) -> str:
    if handoff_seconds is None:
        return "Commands run to their timeout (default 300 s), then their whole process tree is stopped."
    return (
        f"Commands still running after {handoff_seconds:g} s move to the background and return a "
        "promoted_process_id."
    )


def description(handoff_seconds: float | None, install: str | None = None) -> str:
    """The tool description, for the model (``install``: the host's package line, if any)."""
    return (
        "Run a bash command (new non-interactive shell per call: cd/exports do not carry over; "
        "stdin closed). Returns stdout then stderr as a terminal shows them, long output cut to head "
        f"and tail, full log archived. {_handoff_words(handoff_seconds)}" + (f" {install}" if install else "")
    )


_WRITERS_LINE = (
    "- In a session, commands that may change things (all but read-only ones: ls, cat, grep, git "
    "status, ...) and write_file/edit_file run one at a time, in call order; read-only ones run at once."
)


def guidance(handoff_seconds: float | None, writers_in_turn: bool = False) -> str:
    """The text the bash tool adds to the run_code description (``writers_in_turn``: the
    session's writers run one at a time, `codemode.policy.CommandPolicy.serialize_writers`)."""
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
            '- `bash({action: "wait", process_id, until: {pattern: "listening on"}, timeout_ms: 30000})` '
            'resolves when a new output line matches (or with `until: "exit"` when it exits), or at the '
            "timeout; `reason` says which, `line` is the match, `next_offset` where to go on: start a "
            "server, wait for it, test against it, stop it, in one program. Background runs report lines "
            "with error keywords (`report_on`) and stop at `timeout_seconds` when given.",
            "- Process ids are opaque and belong to this session; keep one in `store` to use it in a later "
            "program.",
            '- `bash({argv: ["git", "log", "-1", msg]})` runs a program without a shell (no quoting needed). '
            "The host's command policy may refuse a run before it starts: code `denied_by_policy`, "
            "`watcher_in_foreground` (watchers, dev servers, `tail -f`: use `run_in_background: true`) or "
            "`redacted_value` (a `[REDACTED:…]` value cannot be passed back: read the secret inside the "
            "command). `rm` of workspace files moves them to a trash the user can restore from.",
            *([_WRITERS_LINE] if writers_in_turn else []),
        ]
    )
