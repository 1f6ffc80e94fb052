"""The Host: one registry, engine, state directory, budget, sandbox policy and process manager."""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from codemode._description import run_code_description
from codemode._ids import check_id
from codemode._images import IMAGE_MAX_COUNT, archived_image, image_descriptors, image_tokens, is_image
from codemode._progress import Progress, ProgressCallback, reporting
from codemode._results import CallResult, HostConfig, RunError, RunImage, RunResult, Usage
from codemode.budget import MIN_BUDGET, TokenCounter, fit_to_budget
from codemode.engine import Engine, EngineLimits, GuestError, HeaderError, LoopSpawner, RunView, parse_header
from codemode.errors import ErrorCode, ToolError, UserError
from codemode.policy import (
    ApprovalRequest,
    Approvals,
    ApproveCallback,
    CommandGuard,
    CommandPolicy,
    Decision,
    Trash,
    approval_commands,
)
from codemode.sandbox import (
    SandboxMode,
    SandboxPolicy,
    check_policy,
    make_session_tmp,
    quota_report,
    remove_session_tmp,
    session_inbox,
    sweep_stale_tmp,
    tmp_mounts,
)
from codemode.state import Archive, ArchiveRef, State, compile_rules_soon, redact_json
from codemode.tools import (
    Extension,
    ProgramScope,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    builtin_extensions,
)
from codemode.tools._bash import Notification, ProcessManager
from codemode.tools.upstream import McpServerConfig, load_mcp_config, parse_mcp_config

if TYPE_CHECKING:
    from codemode.tools.upstream import UpstreamServers

McpServers = str | Path | dict[str, Any] | list[McpServerConfig] | tuple[McpServerConfig, ...]
"""What ``Host(mcp_servers=...)`` takes: an ``mcpServers`` JSON file, its parsed object, or
`McpServerConfig`s."""


class Host:
    """Owns everything one agent needs for Code Mode; use as an async context manager.

    Example:
        ```python
        async with Host(workspace=".") as host:
            result = await host.run_code('print(await tools.read_file({path: "README.md"}))')
        ```

    Args:
        config: A `HostConfig`; or pass its fields as keyword arguments.
        approve: Decides, in batches, on calls that need approval (tools whose permission is
            ``ask``, per-call capabilities such as ``network: true`` while the network is
            off, commands the command policy marks): an async callable taking a list of
            `ApprovalRequest` and returning one `Decision` per request. Without it nothing
            asks (``ask`` means allow); ``deny`` permissions still refuse.
        command_policy: What the ``bash`` tool may run (`CommandPolicy`): denied executables,
            strict parsing, watchers refused in the foreground, protected deletes, masked values
            refused. Default ``CommandPolicy()``: permissive (what cannot be parsed runs
            unchecked), nothing denied, the rest on. No tool argument can loosen it.
        mcp_servers: The user's MCP servers, mounted as ``tools.<server>.<tool>``: an
            ``mcpServers`` JSON file, its parsed object, or `McpServerConfig`s.
        connect_mcp_at_open: Connect them when the Host opens (default: on first use, i.e.
            the first program, direct call, search or description that needs their tools).
        **options: `HostConfig` fields.

    Raises:
        UserError: Invalid configuration (named in the message).
    """

    def __init__(
        self,
        config: HostConfig | None = None,
        *,
        approve: ApproveCallback | None = None,
        command_policy: CommandPolicy | None = None,
        mcp_servers: McpServers | None = None,
        connect_mcp_at_open: bool = False,
        **options: Any,
    ) -> None:
        self.command_policy = command_policy if command_policy is not None else CommandPolicy()
        if config is not None and options:
            raise UserError("pass either a HostConfig or keyword options, not both")
        try:
            self.config = config if config is not None else HostConfig(**options)
        except Exception as exc:
            raise UserError(f"invalid Host configuration: {exc}") from exc
        if self.config.max_output_tokens > self.config.max_output_tokens_limit:
            raise UserError("max_output_tokens must not exceed max_output_tokens_limit")
        check_id(self.config.session_id, "session_id")
        workspace = self.config.workspace.expanduser().resolve()
        if not workspace.is_dir():
            raise UserError(f"workspace {workspace} is not a directory")
        self.workspace = workspace
        self.registry = ToolRegistry()
        self.counter = TokenCounter(self.config.encoding)
        self._policy = SandboxPolicy(
            mode=self.config.sandbox,
            writable_roots=(workspace, *(Path(r).expanduser().resolve() for r in self.config.writable_roots)),
            network=self.config.network,
            protected=(self.config.state_dir.expanduser().resolve(),),
        )
        check_policy(self._policy)
        self.engine = Engine(
            self.registry,
            EngineLimits(
                memory_bytes=self.config.memory_mb * 1024 * 1024,
                cpu_seconds=self.config.cpu_seconds,
                tool_concurrency=self.config.tool_concurrency,
                calls_in_flight=self.config.calls_in_flight,
                tool_data_bytes=self.config.tool_data_mb * 1024 * 1024,
            ),
        )
        self._state: State | None = None
        self.approvals = Approvals(
            approve,
            permissions=self.config.tool_permissions,
            network_default=self.config.network,
            redact=lambda text: self.archive.redactor.redact(text),
            audit=self._audit_approval,
            commands=approval_commands(self.command_policy, workspace),
        )
        # Every call passes the approvals (cheap when nothing is asked: a permission lookup and
        # a look for capability arguments); without a callback nothing asks, but a call still
        # gets no more than the host allows.
        self._gate = self.approvals
        self._processes: ProcessManager | None = None
        self._session_tmp: dict[str, Path] = {}
        self._sessions_noted: set[str] = set()  # sessions this host has marked known in the state dir
        self._in_flight: dict[tuple[str, str], anyio.Event] = {}
        self._mcp_configs: list[McpServerConfig] = _server_configs(mcp_servers)
        self._connect_mcp_at_open = connect_mcp_at_open
        self._spawner: LoopSpawner | None = None
        self._upstream: UpstreamServers | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Host:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open the state directory and register the built-in tools (idempotent).

        Raises:
            StateDirError: The state directory cannot be created or secured.
        """
        if self._state is not None:
            return
        self._state = state = State(
            self.config.state_dir.expanduser(),
            log_cap_bytes=self.config.log_cap_bytes,
            quota_bytes=self.config.state_quota_bytes,
        )
        # Loading the tokenizer takes about a second, compiling the secret rules half a
        # second; do both now, off the loop, so the first long output does not pay for them.
        # Counting and redaction wait for these loads if they come first.
        if self.config.preload_tokenizer:
            threading.Thread(
                target=lambda: self.counter.exact, name="codemode-tokenizer", daemon=True
            ).start()
            compile_rules_soon()
        if self.config.builtin_tools:
            # The process manager pins the logs of completions not yet delivered (so they
            # survive the archive's compaction and expiry below).
            self._processes = ProcessManager(
                state.archive,
                handoff_seconds=self.config.handoff_seconds,
                max_background_per_session=self.config.max_background_per_session,
                command_gate=CommandGuard(self.command_policy, self.trash),
                tmp_share_bytes=self.config.tmp_quota_mb * 1024 * 1024,
            )
            # A reopened host replaces the built-ins of its previous opening (new manager).
            for name in ("files", "archive", "bash", "monitor"):
                self.registry.remove_extension(name)
            # Loaded at the first use of one of their tools. The monitor is on by default;
            # host.disable_extension("monitor") removes its tools and guidance.
            for extension in builtin_extensions(self._processes):
                self.registry.add_extension(extension)
        state.maintain()
        if tmp_mounts(state.archive.state_dir / "tmp"):  # session tmpfs left by a killed host
            await anyio.to_thread.run_sync(self.trash.file_all)  # what rm moved there, before its mount goes
            sweep_stale_tmp(state.archive.state_dir / "tmp")
        if self._mcp_configs:
            servers = self._servers()
            for server in self._mcp_configs:
                servers.add(server)
            if self._connect_mcp_at_open:
                await servers.ensure_connected()

    def _servers(self) -> UpstreamServers:
        """The upstream servers, made at first need: the MCP SDK client loads only then
        (about 0.5 s of the cold start of a run that mounts no server: bench/bench_cold.py).

        Raises:
            UserError: The host is not open.
        """
        if self._upstream is None:
            if self._state is None:
                raise UserError(
                    "the Host is not open: use `async with Host(...) as host:` or await host.open()"
                )
            from codemode.tools.upstream import UpstreamServers

            self._upstream = UpstreamServers(
                state=self._state,
                spawn=self._spawn,
                workspace=self.workspace,
                policy=lambda: self._policy,
                install=self._install_server,
                taken=lambda: [n for n in self.registry.names() if "." not in n],
            )
        return self._upstream

    def _spawn(self, factory: Callable[[], Any]) -> None:
        """Start a task that outlives its caller (an MCP server's session), on this loop."""
        if self._spawner is None:
            self._spawner = LoopSpawner()  # made at the first use: a Host without servers needs none
        self._spawner.spawn(factory, lambda: None)

    def _install_server(self, ident: str, extension: Extension) -> None:
        """Put an upstream server's extension (its tools, its guidance) in the registry."""
        from codemode.tools.upstream import EXTENSION_PREFIX

        self.registry.remove_extension(EXTENSION_PREFIX + ident)
        self.registry.add_extension(extension)

    def add_mcp_server(self, name: str, server: dict[str, Any] | None = None, **fields: Any) -> str:
        """Mount one more MCP server (``mcpServers`` fields: ``command``/``args``/``env``/``cwd``,
        or ``url``/``headers``; ``timeout``, ``sandbox``). It connects on first use.

        Returns:
            Its identifier: the program calls ``tools.<identifier>.<tool>(args)``.

        Raises:
            UserError: The fields are invalid, or the name is taken.
        """
        (config,) = parse_mcp_config({name: {**(server or {}), **fields}}, source="add_mcp_server")
        self._mcp_configs.append(config)
        if self._state is None:
            return name  # added at open
        return self._servers().add(config)

    async def connect_mcp_servers(self) -> None:
        """Connect the MCP servers not tried yet (at once); one that fails says why in its
        guidance, its calls and ``mcp_servers_report``. Idempotent."""
        if self._upstream is not None:
            await self._upstream.ensure_connected()

    async def mcp_servers_report(self) -> list[dict[str, Any]]:
        """Each MCP server (connecting it first): reachable or why not, tool count, server
        version, transport, its log file; no env or header values."""
        return [] if self._upstream is None else await self._upstream.report()

    def mcp_server_log(self, name: str) -> str:
        """An MCP server's log (its stderr and codemode's lines about it), redacted.

        Raises:
            UserError: No such server, or the host is not open.
        """
        return self._servers().read_log(name)

    async def aclose(self) -> None:
        """Stop foreground commands and close the state directory. Background processes survive.

        A session's temp dir (its commands' ``TMPDIR``) is removed unless the session still
        has running background processes, which keep using it.
        """
        self.engine.close()
        try:
            if self._upstream is not None:
                await self._upstream.aclose()
                self._upstream = None
            if self._spawner is not None:
                await self._spawner.aclose(5.0)
                self._spawner = None
            if self._processes is not None:
                await anyio.to_thread.run_sync(self.trash.file_all)  # what rm moved during background runs
                for session, path in list(self._session_tmp.items()):
                    running = [
                        p
                        for p in self._processes.list_processes(session, watchers=True)
                        if p["state"] == "running"
                    ]
                    if not running:
                        remove_session_tmp(path)
                await self._processes.aclose()
            else:
                for path in self._session_tmp.values():
                    remove_session_tmp(path)
        finally:
            self._processes = None
            self._session_tmp.clear()
            if self._state is not None:
                self._state.close()
                self._state = None

    @property
    def state(self) -> State:
        """The open state directory (its database and stores).

        Raises:
            UserError: The host is not open.
        """
        if self._state is None:
            raise UserError("the Host is not open: use `async with Host(...) as host:` or await host.open()")
        return self._state

    @property
    def archive(self) -> Archive:
        """The open state directory's archive (archived text and logs).

        Raises:
            UserError: The host is not open.
        """
        return self.state.archive

    @property
    def trash(self) -> Trash:
        """The workspace's trash (protected deletes) in the state directory.

        Raises:
            UserError: The host is not open.
        """
        return Trash(self.archive.state_dir, self.workspace)

    @property
    def processes(self) -> ProcessManager:
        """The process manager behind the bash tool.

        Raises:
            UserError: The host is not open, or was made with builtin_tools=False.
        """
        if self._processes is None:
            raise UserError("no process manager: open the Host with builtin_tools=True")
        return self._processes

    # -- policy -----------------------------------------------------------------------------

    @property
    def policy(self) -> SandboxPolicy:
        """The sandbox policy (plain data) in force for new calls."""
        return self._policy

    def set_sandbox_mode(self, mode: SandboxMode | str) -> None:
        """Change the sandbox mode for calls made from now on."""
        self._policy = self._policy.with_mode(SandboxMode(mode))

    def add_writable_root(self, root: str | Path) -> None:
        """Make one more directory writable for commands and file tools.

        Raises:
            UserError: The directory does not exist or would expose the state directory.
        """
        path = Path(root).expanduser().resolve()
        if not path.is_dir():
            raise UserError(f"writable root {path} is not a directory")
        candidate = self._policy.with_root(path)
        check_policy(candidate)
        self._policy = candidate

    def _session(self, session_id: str | None) -> str:
        """The session a call names (checked), or the configured one.

        Raises:
            UserError: The id is empty, too long or holds control characters.
        """
        return self.config.session_id if session_id is None else check_id(session_id, "session_id")

    def _context(self, session_id: str, call_id: str | None) -> ToolContext:
        temp = self._session_tmp.get(session_id)
        if temp is None:
            # Inside the state directory, so other sessions' commands cannot read it (the sandbox
            # keeps the whole state directory out of reach but for a session's own temp dir).
            # A tmpfs of tmp_quota_mb where the host can mount, else a counted plain directory.
            temp = make_session_tmp(self.archive.state_dir / "tmp", self.config.tmp_quota_mb * 1024 * 1024)
            self._session_tmp[session_id] = temp
        return ToolContext(
            session_id=session_id,
            workspace=self.workspace,
            policy=replace(self._policy, temp_dir=temp, trash_inbox=session_inbox(temp)),
            archive=self.archive,
            call_id=call_id,
            store=self.state.values.for_session(session_id),
        )

    # -- tools ------------------------------------------------------------------------------

    def add_tool(self, item: Tool | Callable[..., Any], **kwargs: Any) -> Tool:
        """Register a tool (a `Tool`, or a function; keyword args as `make_tool`).

        Raises:
            UserError: The name is taken or the function cannot be described.
        """
        return self.registry.add(item, **kwargs)

    def tool(self, name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]], Tool]:
        """Decorator form of `add_tool`."""

        def decorate(fn: Callable[..., Any]) -> Tool:
            return self.registry.add(fn, name=name, **kwargs)

        return decorate

    def add_extension(self, extension: Extension) -> None:
        """Register a group of tools plus its guidance text."""
        self.registry.add_extension(extension)

    def disable_extension(self, name: str) -> None:
        """Remove an extension's tools and guidance."""
        self.registry.disable_extension(name)

    def enable_extension(self, name: str) -> None:
        """Bring a disabled extension back."""
        self.registry.enable_extension(name)

    def run_code_description(self) -> str:
        """The text an agent puts in the description of its ``run_code`` tool (the same from
        call to call while the tools stay the same; see `codemode._description`)."""
        return run_code_description(self.config, self.registry)

    # -- run_code ---------------------------------------------------------------------------

    async def run_code(
        self,
        source: str,
        *,
        session_id: str | None = None,
        call_id: str | None = None,
        max_output_tokens: int | None = None,
        timeout_seconds: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_output: Callable[[str], object] | None = None,
    ) -> RunResult:
        """Run one program. Guest failures are in the result, never raised.

        Args:
            source: The JavaScript program (optionally starting with a ``// @run_code:`` line).
            session_id: Session for ``store`` and processes (default: the config's).
            call_id: Id to record the result under; a recorded id replays its result.
            max_output_tokens: Budget when the header gives none (clamped to the limit).
            timeout_seconds: Wall-clock limit when the header gives none (clamped).
            on_progress: Awaited with a `Progress` about once a second while the program runs.
            on_output: Called on the event loop's thread with each piece of text the program
                prints, as the host collects it (raw: redact it before showing it; a replayed
                result calls it never). The program never waits for it.

        Raises:
            UserError: The host is not open, or not running on asyncio; or ``session_id`` or
                ``call_id`` is empty, longer than 256 characters or holds control characters.
        """
        runs = self.state.runs
        if self._upstream is not None:
            await self._upstream.ensure_connected()
        if timeout_seconds is not None and not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
            raise UserError(f"timeout_seconds must be a positive number of seconds, got {timeout_seconds!r}")
        if max_output_tokens is not None and max_output_tokens <= 0:
            raise UserError(f"max_output_tokens must be positive, got {max_output_tokens!r}")
        session = self._session(session_id)
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
            result = await self._run_code(
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
        recorded = self.state.runs.get(*record_key)
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
        await self._count_ready()
        return self._result(
            call, session, "", error, [], [], self.config.max_output_tokens, 0, 0, time.perf_counter()
        )

    async def _run_code(
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
        try:
            header = parse_header(source)
        except HeaderError as exc:
            options_error = RunError(kind="options", name="OptionsError", message=f"{exc}; nothing ran")
            await self._count_ready()
            return self._result(
                call, session, "", options_error, [], notices, config.max_output_tokens, 0, 0, started
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
            await self._count_ready()
            return self._result(call, session, "", too_small, [], notices, MIN_BUDGET, 0, 0, started)
        timeout = header.timeout_seconds or timeout_seconds or config.timeout_seconds
        if timeout > config.max_timeout_seconds:
            notices.append(
                f"timeout_seconds {timeout:g} is above this host's limit; clamped to {config.max_timeout_seconds:g}"
            )
            timeout = config.max_timeout_seconds
        # Calls of the program wait for their answers up to its deadline (see ProgramScope).
        scope = ProgramScope(deadline=time.monotonic() + timeout)
        context = replace(self._context(session, call), program=scope)
        view = RunView()

        def sample(elapsed: float) -> Progress:
            output = self._processes.output_bytes(session, call) if self._processes is not None else 0
            return Progress(
                elapsed_seconds=elapsed,
                printed_chars=view.printed_chars,
                tool_calls=view.tool_calls,
                output_bytes=output,
            )

        async with reporting(on_progress, sample):
            outcome = await self.engine.run(
                source, context, timeout_seconds=timeout, gate=self._gate, view=view, on_output=on_output
            )
        if scope.promoted and outcome.error is not None:
            outcome.error = _name_promoted(outcome.error, scope.promoted)
            for _ in scope.promoted:  # promoted, not stopped: not "cancelled"
                if "bash" in outcome.cancelled:
                    outcome.cancelled.remove("bash")
        error = _run_error(outcome.error, self.archive.redactor.redact) if outcome.error is not None else None
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
            notices.append(_late_notice(name, value, "while the program ran"))
        if outcome.unawaited_more:
            notices.append(
                f"{outcome.unawaited_more} more calls that change something finished while the program ran "
                "without being awaited; await every call you start"
            )
        for name, value in outcome.late:
            notices.append(_late_notice(name, value, "after the program ended"))
        images = self._images(outcome.images, budget, session, notices)
        await self._count_ready()
        return self._result(
            call,
            session,
            outcome.output,
            error,
            outcome.cancelled,
            notices,
            budget,
            outcome.tool_calls,
            outcome.cpu_seconds * 1000,
            started,
            guest_error=outcome.error,
            images=images,
        )

    def _images(
        self, shown: list[tuple[str, str]], budget: int, session: str, notices: list[str]
    ) -> list[RunImage]:
        """The images a program showed that fit half the budget (its text keeps the rest); each
        other one is archived and a notice names its reference, never dropped silently."""
        kept: list[RunImage] = []
        room = budget // 2
        for number, (mime_type, data) in enumerate(shown, 1):
            tokens = image_tokens(mime_type, data)
            if tokens <= room:
                kept.append(RunImage(mime_type=mime_type, data=data, tokens=tokens))
                room -= tokens
                continue
            ref = self.archive.put(base64.b64decode(data), kind="image", session_id=session).ref
            notices.append(
                f"image {number} ({mime_type}, {tokens} tokens) did not fit half of max_output_tokens "
                f"({budget}) and was archived as {ref}; raise max_output_tokens or show fewer, smaller images"
            )
        return kept

    def _result(
        self,
        call: str,
        session: str,
        output: str,
        error: RunError | None,
        cancelled: list[str],
        notices: list[str],
        budget: int,
        tool_calls: int,
        cpu_ms: float,
        started: float,
        guest_error: GuestError | None = None,
        images: list[RunImage] | None = None,
    ) -> RunResult:
        images = images or []
        image_cost = sum(image.tokens for image in images)
        trailer_lines: list[str] = []
        if cancelled:
            counts = collections.Counter(cancelled)
            names = ", ".join(f"tools.{n}" + (f" x{c}" if c > 1 else "") for n, c in counts.most_common())
            trailer_lines.append(
                f"[{len(cancelled)} tool call(s) still pending when the program ended were cancelled (stopped "
                f"before they took effect): {names}; await every call you start]"
            )
        if error is not None:
            description = (
                guest_error.describe() if guest_error is not None else f"{error.name}: {error.message}"
            )
            trailer_lines.append(description)
        trailer_lines.extend(f"[note: {n}]" for n in notices)
        trailer_lines.extend(self._take_notifications(session))
        fitted = self._fit([output], "\n".join(trailer_lines), max(MIN_BUDGET, budget - image_cost), session)
        return RunResult(
            call_id=call,
            session_id=session,
            ok=error is None,
            text=fitted.text,
            truncated=fitted.truncated,
            refs=fitted.refs,
            error=error,
            cancelled_calls=cancelled,
            notices=notices,
            images=images,
            usage=Usage(
                output_tokens=fitted.tokens + image_cost,
                max_output_tokens=budget,
                printed_bytes=fitted.printed_bytes,
                tool_calls=tool_calls,
                cpu_ms=round(cpu_ms, 3),
                wall_ms=round((time.perf_counter() - started) * 1000, 3),
            ),
        )

    async def _count_ready(self) -> None:
        """Load the token counter off the event loop if it is not loaded yet: every result
        counts the tokens the model receives (`Usage.output_tokens`)."""
        if not self.counter.loaded:
            await anyio.to_thread.run_sync(lambda: self.counter.exact)

    def _fit(self, blocks: list[str], trailer: str, budget: int, session: str) -> _Fitted:
        """Redact the output ``blocks`` and the ``trailer`` and fit them into ``budget`` tokens.

        The trailer (errors, notes, notifications) is the last block: like every block that
        does not fit its share, it keeps its head and tail (see `fit_to_budget`).
        """
        redact = self.archive.redactor.redact
        archive = self.archive
        refs: list[str] = []

        def keep(whole: str) -> ArchiveRef:
            # The text is redacted already; bytes are archived as given.
            ref = archive.put(whole.encode("utf-8", "surrogatepass"), kind="output", session_id=session)
            refs.append(ref.ref)
            return ref

        output = [redact(block) for block in blocks if block]
        printed = len("\n".join(output).encode("utf-8", "surrogatepass"))
        if trailer:
            if output:
                output[-1] = output[-1].rstrip("\n")
            output.append(redact(trailer))
        cut = fit_to_budget(output, budget, self.counter, keep)
        return _Fitted(cut.text, cut.truncated, refs, cut.tokens, printed)

    # -- direct calls -----------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
        call_id: str | None = None,
        max_output_tokens: int | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CallResult:
        """Call one tool directly, the way an agent calls a tool without Code Mode.

        Unknown tools, bad arguments and handler failures come back as ``is_error``
        results; the text is cut to the budget (the rest archived, as for ``run_code``).
        ``on_progress`` is awaited with a `Progress` about once a second while the call runs.

        Raises:
            UserError: The host is not open; or ``session_id`` or ``call_id`` is empty, longer
                than 256 characters or holds control characters.
        """
        session = self._session(session_id)
        if call_id is not None:
            check_id(call_id, "call_id")
        # A call that reports progress needs an id its commands are counted under.
        call = call_id if call_id is not None or on_progress is None else f"call_{uuid.uuid4().hex}"
        context = self._context(session, call)
        if self._upstream is not None:
            await self._upstream.ensure_connected()

        def sample(elapsed: float) -> Progress:
            output = self._processes.output_bytes(session, call) if self._processes and call else 0
            return Progress(elapsed_seconds=elapsed, output_bytes=output)

        arguments = args if args is not None else {}
        budget = min(max_output_tokens or self.config.max_output_tokens, self.config.max_output_tokens_limit)
        refusal = await self._approve_direct(name, arguments, session) if budget >= MIN_BUDGET else None
        if budget < MIN_BUDGET:
            message = (
                f"max_output_tokens must be at least {MIN_BUDGET} (room for the line naming the archived "
                f"rest), got {budget}; nothing ran"
            )
            result: ToolResult = ToolResult.failure(
                ErrorCode.INVALID_ARGUMENTS, message, {"minimum": MIN_BUDGET}
            )
            budget = MIN_BUDGET
        elif refusal is not None:
            result = ToolResult.failure(ErrorCode.DENIED, refusal, {"error": "denied"})
        else:
            async with reporting(on_progress, sample):
                result = await self.registry.call(name, arguments, context)
        trailer = "\n".join(self._take_notifications(session))
        blocks = [block.text for block in result.content]
        images = await self._tool_images(name, result, budget, session)
        await self._count_ready()
        image_cost = sum(image.tokens for image in images)
        fitted = self._fit(blocks, trailer, max(MIN_BUDGET, budget - image_cost), session)
        return CallResult(
            tool=name,
            text=fitted.text,
            structured_content=redact_json(result.structured_content, self.archive.redactor.redact),
            is_error=result.is_error,
            truncated=fitted.truncated,
            refs=fitted.refs,
            images=images,
        )

    async def _tool_images(self, name: str, result: ToolResult, budget: int, session: str) -> list[RunImage]:
        """The images a mounted server's tool returned (archived; its data names each by ref), for
        a direct call's client: up to 8 that are what they say and fit half the budget, as a
        program's (the others stay named by ref in the text)."""
        tool = self.registry.get(name)
        found = image_descriptors(result.structured_content) if tool and tool.origin else []
        if result.error is not None or not found:
            return []

        def read() -> list[RunImage]:
            shown: list[RunImage] = []
            room = budget // 2
            for mime_type, ref in found[:IMAGE_MAX_COUNT]:
                try:
                    data = archived_image(self.archive, ref, session)
                except ToolError:
                    continue  # over 5 MiB: its ref stays in the text
                tokens = image_tokens(mime_type, data)
                if tokens <= room and is_image(mime_type, base64.b64decode(data[:24])):
                    shown.append(RunImage(mime_type=mime_type, data=data, tokens=tokens))
                    room -= tokens
            return shown

        return await anyio.to_thread.run_sync(read)

    async def _approve_direct(self, name: str, arguments: dict[str, Any], session: str) -> str | None:
        """Ask the approvals about one direct call (a batch of one); the refusal, or None."""
        tool = self.registry.get(name)
        if self._gate is None or tool is None:
            return None
        try:
            tool.parse(arguments)
        except ToolError:
            return None  # the call itself reports its invalid arguments; nothing to approve
        gate = self._gate
        if gate.reads_files(tool, arguments):  # the command policy may read a script a command wrote
            needs = await anyio.to_thread.run_sync(lambda: gate.requests(tool, arguments, session))
        else:
            needs = gate.requests(tool, arguments, session)
        if isinstance(needs, str):
            return f"{name}: {needs}"
        if not needs:
            return None
        refusal = gate.refusal(needs, await gate.decide(needs))
        return None if refusal is None else f"{name}: {refusal}"

    def _audit_approval(self, request: ApprovalRequest, decision: Decision) -> None:
        """Keep an approval request and its decision in the state dir (the audit records)."""
        self.state.approvals.record(
            request_id=request.id,
            session_id=request.session_id,
            kind=request.kind.value,
            tool=request.tool,
            summary=request.summary,
            arguments_json=json.dumps(request.arguments, ensure_ascii=False),
            rule=request.rule,
            verdict=decision.verdict,
            reason=decision.reason,
        )

    def search_tools(self, query: str, limit: int = 10) -> list[dict[str, str]]:
        """Ranked ``{name, description}`` for a query (what ``searchTools`` returns)."""
        return self.registry.search(query, limit=limit)

    def describe_tool(self, name: str) -> dict[str, Any]:
        """Schema and TypeScript signature of one tool (what ``describeTool`` returns).

        Raises:
            ToolError: No such tool.
        """
        return self.registry.describe(name)

    # -- background processes and notifications ---------------------------------------------

    def pending_notifications(self, session_id: str | None = None) -> list[Notification]:
        """Completions of background processes, their keyword reports and Monitor events, not
        yet acknowledged.

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        session = self._session(session_id)
        if self._processes is None:
            return []
        return self._processes.pending_notifications(session)

    def ack_notifications(self, ids: list[int], session_id: str | None = None) -> list[int]:
        """Mark notifications delivered; they are never returned again.

        Returns:
            The ids this call marked (one delivered already, by another channel, is left out).

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        session = self._session(session_id)
        if self._processes is None:
            return []
        return self._processes.ack(session, ids)

    async def notifications(
        self, session_id: str | None = None, *, poll_seconds: float = 0.01
    ) -> AsyncIterator[Notification]:
        """Yield completions, keyword reports and Monitor events as they arrive, each once per
        session: a notification is acknowledged (persisted) as it is yielded, so no other
        channel (a result's trailer, another host) delivers it again, also after a restart.

        The database is looked at again only when another connection committed to it
        (``PRAGMA data_version``, every ``poll_seconds``); live records are reconciled (a
        supervisor that died) about once a second.

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        session = self._session(session_id)
        version: int | None = None
        reconciled = 0.0
        while True:
            processes = self._processes
            if processes is not None:
                now = time.monotonic()
                changed = processes.pending_changed()
                if changed != version or now - reconciled >= 1.0:
                    version = changed
                    reconcile = now - reconciled >= 1.0
                    if reconcile:
                        reconciled = now
                    for note in processes.pending_notifications(session, reconcile=reconcile):
                        if processes.ack(session, [note.id]):
                            yield note
            await anyio.sleep(poll_seconds)

    def _take_notifications(self, session_id: str) -> list[str]:
        if not self.config.notify_in_results or self._processes is None:
            return []
        notes = self._processes.pending_notifications(session_id)
        if not notes:
            return []
        claimed = set(self._processes.ack(session_id, [n.id for n in notes]))
        return [n.text for n in notes if n.id in claimed]

    async def close_session(self, session_id: str) -> None:
        """Stop the session's ``lifecycle: session`` processes, drop its temp dir and its
        standing approval decisions.

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        check_id(session_id, "session_id")
        self.approvals.forget_session(session_id)
        if self._processes is not None:
            await self._processes.close_session(session_id)
        temp = self._session_tmp.pop(session_id, None)
        if temp is not None:
            if self._state is not None:
                await anyio.to_thread.run_sync(self.trash.file_all)  # before the inbox goes with the temp dir
            remove_session_tmp(temp)
        self._sessions_noted.discard(session_id)  # a server front keeps nothing per ended session

    def session_exists(self, session_id: str) -> bool:
        """Whether the state directory knows this session: it ran a program or a tool that
        archived text, kept a store value, or started a background process.

        Raises:
            UserError: ``session_id`` is not a valid id, or the host is not open.
        """
        check_id(session_id, "session_id")
        if self._processes is not None and self._processes.list_processes(session_id, watchers=True):
            return True
        return self.state.runs.has_session(session_id)

    # -- diagnostics ------------------------------------------------------------------------

    def doctor(self) -> dict[str, Any]:
        """Facts for ``codemode doctor``: engine, tokenizer, state dir, sandbox."""
        from codemode._version import __version__
        from codemode.engine import ENGINE_VERSION
        from codemode.sandbox import landlock_status, sandbox_report

        state = self.config.state_dir.expanduser()
        status = landlock_status()
        counter = self.counter
        counter.count("x" * 4096)  # force the encoding to load (or fall back) now
        return {
            "engine": {"quickjs-ng": ENGINE_VERSION, "codemode": __version__},
            "tokenizer": {
                "encoding": counter.encoding_name,
                "exact": counter.exact,
                "fallback": counter.fallback_reason,
            },
            "state_dir": {
                "path": str(state),
                "exists": state.is_dir(),
                "mode": oct(state.stat().st_mode & 0o777) if state.is_dir() else None,
            },
            "temp_dirs": (
                quota_report(self.archive.state_dir / "tmp", self.config.tmp_quota_mb * 1024 * 1024)
                if self._state is not None
                else {"form": "unknown", "quota_mb": self.config.tmp_quota_mb, "detail": "state dir not open"}
            ),
            "sandbox": {
                "mode": self._policy.mode.value,
                "network": self._policy.network,
                "writable_roots": [str(r) for r in self._policy.writable_roots],
                "landlock_abi": status.abi,
                "fs_rights": list(status.fs_rights),
                "network_rules": status.network_rules,
                "net_rights": list(status.net_rights),
                "scopes": list(status.scopes),
                "reason": status.reason,
                "summary": status.describe(),
                "layers": [vars(layer) for layer in sandbox_report(self._policy)],
            },
        }


@dataclass(frozen=True)
class _Fitted:
    text: str
    truncated: bool
    refs: list[str]
    tokens: int
    printed_bytes: int


def _late_notice(name: str, value: ToolResult, when: str) -> str:
    """What a call nothing awaited did (one line); ``when`` it finished."""
    text = " ".join(value.text.split())
    if len(text) > 300:
        text = text[:300] + "…"
    verb = "failed" if value.is_error else "finished"
    return f"tools.{name} (not awaited) {verb} {when}: {text}; await every call you start"


def _server_configs(servers: McpServers | None) -> list[McpServerConfig]:
    """The servers ``Host(mcp_servers=...)`` names.

    Raises:
        UserError: The file or object is not a valid ``mcpServers`` configuration.
    """
    if servers is None:
        return []
    if isinstance(servers, str | Path):
        return load_mcp_config(servers)
    if isinstance(servers, dict):
        return parse_mcp_config(servers)
    return list(servers)


def _name_promoted(error: GuestError, process_ids: list[str]) -> GuestError:
    """The program's error, naming the commands that were still running when it ended and
    go on in the background."""
    if len(process_ids) == 1:
        pid = process_ids[0]
        what = f'a command was still running; it goes on as process {pid}: bash({{action: "wait", process_id: "{pid}"}})'
    else:
        what = (
            f"{len(process_ids)} commands were still running; they go on as processes "
            f'{", ".join(process_ids)}: bash({{action: "wait", process_id}})'
        )
    return replace(error, message=f"{error.message}; {what}")


def _run_error(error: GuestError, redact: Callable[[str], str]) -> RunError:
    return RunError(
        kind=error.kind,
        name=error.name,
        message=redact(error.message),
        line=error.line,
        column=error.column,
        stack=redact(error.stack),
        tool=error.tool,
    )


def run_code(source: str, **options: Any) -> RunResult:
    """Run one program synchronously on a temporary `Host` (for scripts and REPLs).

    Args:
        source: The program.
        **options: `HostConfig` fields, plus ``session_id``/``call_id``/``max_output_tokens``/
            ``timeout_seconds`` for the run.

    Raises:
        UserError: Called inside a running event loop (use ``await host.run_code`` there).
    """
    try:
        import asyncio

        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError(
            "codemode.run_code() cannot run inside a running event loop; "
            "use `async with Host(...) as host: await host.run_code(...)`"
        )
    run_keys = ("session_id", "call_id", "max_output_tokens", "timeout_seconds")
    run_options = {k: options.pop(k) for k in run_keys if k in options}

    async def main() -> RunResult:
        async with Host(**options) as host:
            return await host.run_code(source, **run_options)

    return anyio.run(main)


def dumps_result(result: RunResult | CallResult) -> str:
    """The result as indented JSON (what ``--json`` prints)."""
    return json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False)
