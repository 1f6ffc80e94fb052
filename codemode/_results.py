"""Public result and configuration types."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic

from codemode.errors import ErrorCode, UserError
from codemode.network import check_entries
from codemode.sandbox import SandboxMode, SandboxPolicy, check_policy, with_state_dirs
from codemode.state import DEFAULT_LOG_CAP_BYTES, DEFAULT_QUOTA_BYTES, MIN_LOG_CAP_BYTES, MIN_QUOTA_BYTES


def default_state_dir() -> Path:
    """``$CODEMODE_HOME``, else ``$XDG_STATE_HOME/codemode``, else ``~/.local/state/codemode``."""
    explicit = os.environ.get("CODEMODE_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "codemode"


def default_engine() -> Literal["process", "thread"]:
    """The engine mode a host gets when its config names none: ``$CODEMODE_ENGINE``, else ``process``.

    Raises:
        UserError: ``$CODEMODE_ENGINE`` is set to something else.
    """
    value = os.environ.get("CODEMODE_ENGINE", "process").strip() or "process"
    if value == "thread":
        return "thread"
    if value != "process":
        raise UserError(f"CODEMODE_ENGINE={value!r}: use 'process' or 'thread'")
    return "process"


class HostConfig(pydantic.BaseModel):
    """Everything a `Host` can be configured with. All fields have working defaults.

    Attributes:
        workspace: Workspace root; relative paths resolve against it; writable by default.
        state_dir: Where archive, logs and records live (default: `default_state_dir()`).
        database_url: A PostgreSQL database (libpq URL or connection string) that hosts on
            several machines share for sessions, held sessions and resume secrets, store values,
            run records, approvals and the consoles' journal (the ``postgres`` extra; README,
            "Several machines"); None: the state directory holds everything. Never logged, and
            never in a command's environment.
        archive_url: An S3-compatible object store that holds the shared copies of archived
            text instead of ``database_url``'s database (which keeps their index):
            ``s3://[KEY:SECRET@]BUCKET[/PREFIX][?endpoint=URL&region=NAME]`` (the ``s3`` extra;
            README, "Several machines"). Needs ``database_url``. Never logged, and never in a
            command's environment.
        session_id: Session used when a call names none.
        max_output_tokens: Default budget of a run's printed text.
        max_output_tokens_limit: Highest budget a program may ask for (requests are clamped).
        timeout_seconds: Default wall-clock limit of one program.
        max_timeout_seconds: Highest wall-clock limit a program may ask for.
        cpu_seconds: CPU time one program's own thread may use.
        memory_mb: QuickJS heap limit of one program.
        tool_concurrency: Tool calls of one program running at once.
        calls_in_flight: Tool calls of one program the host holds at once, running or waiting
            to run; one more fails with an error saying so.
        tool_data_mb: Tool-call data the host holds for one program at a time (arguments of
            calls queued or running, and the result being handed over, as JSON text); a call
            that would go beyond it fails with an error saying so.
        encoding: tiktoken encoding for counting tokens.
        engine: Where programs run. ``process`` (default): each in a worker process confined
            like a command and more (no file, no socket, no exec, no root), so a crash or an
            exploit of QuickJS costs that program only; ``thread``: in a thread of this process,
            the lowest latency, for programs you trust. ``$CODEMODE_ENGINE`` sets the default.
        max_workers: Worker processes running programs at once in process mode (default 4 per
            CPU, at least 64); programs beyond wait for one.
        idle_workers: Worker processes kept idle for their sessions' next programs in process
            mode (default one per 16 MiB of memory, at most 1,024; 0: a new one each program).
        sandbox: Sandbox mode for commands and file tools.
        network: Whether confined commands may open TCP connections.
        network_allow: With ``network``, the domains confined commands may reach (``pypi.org``;
            ``*.githubusercontent.com`` for its subdomains; an IP address as written): each
            command then has a network namespace of its own whose one way out is the host's
            filtering proxy (HTTP CONNECT and plain HTTP). None: the whole network. A bash call's
            own list narrows it; an entry it does not cover asks (a ``capability`` approval).
        writable_roots: Extra writable directories besides the workspace.
        handoff_seconds: Foreground commands still running after this long move to the
            background (None: never; they run to their timeout).
        max_background_per_session: Live background processes one session may have.
        notify_in_results: End each result with one line per finished background process.
        builtin_tools: Register bash, read_file, edit_file, write_file and read_archive.
        log_cap_bytes: Most bytes one command's log keeps in the state directory while it
            runs (its head and its tail; every byte is still counted and the result says what
            was kept). Reaching it never stops or slows the command. At least 1 MiB.
        state_quota_bytes: Most bytes the state directory holds; past it, finished entries
            are evicted, the oldest finished logs first (logs still being written never are).
            At least 4 MiB.
        tmp_quota_mb: Most a session's temp dir (its commands' ``$TMPDIR`` and ``/dev/shm``)
            holds: a tmpfs of this size where the host can mount (a write past it fails with
            ENOSPC), else counted before each command (a session over it gets no new command
            until it cleans up ``$TMPDIR``).
        preload_tokenizer: Load the exact token counter's tables and compile the secret
            rules on threads of their own when the host opens (about a second and a half of
            CPU), so the first long output does not wait for them, and count every result's
            tokens exactly; off, they load when an output is first long enough to need them,
            and until then a result that fits its budget by its UTF-8 size reports that size
            as its ``usage.output_tokens`` (an upper bound: a token covers at least one byte).
        tool_permissions: Per-tool permission, by tool name: ``allow``, ``ask`` (the
            ``approve`` callback decides) or ``deny``. Tools not named: read-only and
            undeclared tools allowed, tools that declare they change things (write_file,
            edit_file) ask; bash's commands are judged one by one.
        tracing: OpenTelemetry spans for each program, tool call, approval wait and bash
            process (the ``otel`` extra; README, "Traces"). None (default): when a
            ``tracer_provider`` is given or this process has set a global TracerProvider;
            True: always; False: never. Untraced, OpenTelemetry is not even imported.
        tracer_provider: The OpenTelemetry TracerProvider spans go to (default: the global one).
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    workspace: Path = pydantic.Field(default_factory=Path.cwd)
    state_dir: Path = pydantic.Field(default_factory=default_state_dir)
    database_url: pydantic.SecretStr | None = None
    archive_url: pydantic.SecretStr | None = None
    session_id: str = "default"
    max_output_tokens: int = pydantic.Field(10_000, ge=80)  # ge: codemode.budget.MIN_BUDGET
    max_output_tokens_limit: int = pydantic.Field(50_000, ge=80)
    timeout_seconds: float = pydantic.Field(120.0, gt=0)
    max_timeout_seconds: float = pydantic.Field(3600.0, gt=0)
    cpu_seconds: float = pydantic.Field(30.0, gt=0)
    memory_mb: int = pydantic.Field(256, ge=16)
    tool_concurrency: int = pydantic.Field(32, ge=1)
    calls_in_flight: int = pydantic.Field(10_000, ge=1)
    tool_data_mb: int = pydantic.Field(64, ge=1)
    encoding: str = "o200k_base"
    engine: Literal["process", "thread"] = pydantic.Field(default_factory=default_engine)
    max_workers: int | None = pydantic.Field(None, ge=1)
    idle_workers: int | None = pydantic.Field(None, ge=0)
    sandbox: SandboxMode = SandboxMode.WORKSPACE_WRITE
    network: bool = True
    network_allow: tuple[str, ...] | None = None
    writable_roots: tuple[Path, ...] = ()
    handoff_seconds: float | None = 10.0
    max_background_per_session: int = pydantic.Field(32, ge=1)
    notify_in_results: bool = True
    builtin_tools: bool = True
    log_cap_bytes: int = pydantic.Field(DEFAULT_LOG_CAP_BYTES, ge=MIN_LOG_CAP_BYTES)
    state_quota_bytes: int = pydantic.Field(DEFAULT_QUOTA_BYTES, ge=MIN_QUOTA_BYTES)
    tmp_quota_mb: int = pydantic.Field(512, ge=1)
    preload_tokenizer: bool = True
    tool_permissions: dict[str, Literal["allow", "ask", "deny"]] = pydantic.Field(default_factory=dict)
    tracing: bool | None = None
    tracer_provider: object = pydantic.Field(None, repr=False)

    @pydantic.field_validator("network_allow")
    @classmethod
    def _domains(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else check_entries(value)

    @pydantic.model_validator(mode="after")
    def _allowlist_needs_network(self) -> HostConfig:
        if self.network_allow is not None and not self.network:
            raise ValueError(
                "network_allow lists domains to reach, and network is off: turn it on or drop the list"
            )
        return self


def host_config(config: HostConfig | None, options: Mapping[str, object]) -> HostConfig:
    """The configuration ``Host(config)`` or ``Host(**options)`` names, checked.

    Raises:
        UserError: Both given, a field invalid, or the budget above its limit.
    """
    if config is not None and options:
        raise UserError("pass either a HostConfig or keyword options, not both")
    try:
        checked = config if config is not None else HostConfig.model_validate(options)
    except Exception as exc:
        raise UserError(f"invalid Host configuration: {exc}") from exc
    if checked.max_output_tokens > checked.max_output_tokens_limit:
        raise UserError("max_output_tokens must not exceed max_output_tokens_limit")
    return checked


def sandbox_policy(config: HostConfig, workspace: Path) -> SandboxPolicy:
    """The sandbox policy a configuration asks for: the workspace and the writable roots
    writable, the state directory protected (checked).

    Raises:
        UserError: The policy would expose the state directory.
    """
    policy = with_state_dirs(  # the file tools read no codemode state dir of this user either
        SandboxPolicy(
            mode=config.sandbox,
            writable_roots=(workspace, *(Path(r).expanduser().resolve() for r in config.writable_roots)),
            network=config.network,
            network_allow=config.network_allow,
            protected=(config.state_dir.expanduser().resolve(),),
        )
    )
    check_policy(policy)
    return policy


class RunError(pydantic.BaseModel):
    """Why a program failed (a guest outcome, not a Python exception)."""

    kind: str
    name: str
    message: str
    line: int | None = None
    column: int | None = None
    stack: str = ""
    tool: str | None = None


class Usage(pydantic.BaseModel):
    """What one run used.

    ``output_tokens`` counts the tokens of the returned text, what the model receives (UTF-8
    bytes, never fewer, when the tokenizer's tables are not available offline, or on a host
    opened without ``preload_tokenizer`` while no output has needed the tokenizer yet).
    """

    output_tokens: int
    max_output_tokens: int
    printed_bytes: int
    tool_calls: int
    cpu_ms: float
    wall_ms: float


class RunImage(pydantic.BaseModel):
    """An image the program showed the model (``image(data, mimeType)``).

    Attributes:
        mime_type: image/png, image/jpeg, image/gif or image/webp (its magic bytes checked).
        data: The image, base64.
        tokens: What it counts in the run's budget (see `codemode._images`).
    """

    mime_type: str
    data: str
    tokens: int


class RunResult(pydantic.BaseModel):
    """The result of one `run_code` call.

    Attributes:
        call_id: The call's id; running it again with this id replays this result.
        session_id: The session it ran in.
        ok: True when the program finished without an error.
        text: What the model sees: printed output within the budget, then any error.
        truncated: Whether the printed output was cut to fit the budget.
        refs: Archive references holding cut text (read them with ``read_archive``).
        error: How the program failed, when it did.
        cancelled_calls: Tool calls still pending when the program ended.
        notices: Host notes (a clamped budget or timeout, ...), also part of ``text``.
        usage: Tokens, bytes, calls and time.
        images: Images the program showed, within the budget (an image that did not fit is
            archived and a notice names its reference).
    """

    call_id: str
    session_id: str
    ok: bool
    text: str
    truncated: bool = False
    refs: list[str] = pydantic.Field(default_factory=list)
    error: RunError | None = None
    cancelled_calls: list[str] = pydantic.Field(default_factory=list)
    notices: list[str] = pydantic.Field(default_factory=list)
    usage: Usage
    images: list[RunImage] = pydantic.Field(default_factory=list)


class CallResult(pydantic.BaseModel):
    """The result of one direct tool call.

    Attributes:
        tool: The tool's name.
        text: What the model sees, within the budget.
        structured_content: The tool's structured data, when it has any; for a failed call,
            `error_content`: the code, then the failure's details.
        is_error: Whether the call failed (or, for bash, whether its command exited non-zero).
        code: Why the call failed, when it failed (None for a result that reports a failed
            outcome as data: bash's non-zero exit).
        truncated: Whether ``text`` was cut to fit the budget.
        refs: Archive references holding cut text.
        images: Images a mounted server's tool returned, within the budget (the text names
            each by its archive ref, as a program receives it).
    """

    tool: str
    text: str
    structured_content: Any = None
    is_error: bool = False
    code: ErrorCode | None = None
    truncated: bool = False
    refs: list[str] = pydantic.Field(default_factory=list)
    images: list[RunImage] = pydantic.Field(default_factory=list)


def error_content(code: ErrorCode, data: Any) -> dict[str, object]:
    """A failed direct call's structured content, as every front hands it on (an MCP client,
    a framework's tool message, ``codemode call --json``): ``code``, then the failure's
    details (``data``'s keys; ``data`` under its own key when it is not an object or has a
    ``code`` of its own)."""
    if data is None:
        return {"code": code.value}
    if isinstance(data, dict) and "code" not in data:
        return {"code": code.value, **data}
    return {"code": code.value, "data": data}


def dumps_result(result: RunResult | CallResult) -> str:
    """The result as indented JSON (what ``--json`` prints)."""
    return json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False)
