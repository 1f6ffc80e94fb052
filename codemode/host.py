"""The Host: one registry, engine, state directory, budget, sandbox policy and process manager."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from codemode._builtins import install_builtins, ready_state_dir
from codemode._description import run_code_description
from codemode._ids import check_id
from codemode._mounts import McpServers, Mounts
from codemode._progress import ProgressCallback
from codemode._results import CallResult, HostConfig, RunResult, host_config, sandbox_policy
from codemode._results import dumps_result as dumps_result  # what --json prints, also here
from codemode._sessions import HeldSessions, Sessions
from codemode._sync import run_code as run_code  # codemode.run_code, also here
from codemode._trace import Watcher
from codemode.budget import TokenCounter
from codemode.errors import UserError
from codemode.policy import (
    Approvals,
    ApproveCallback,
    CommandGuard,
    CommandPolicy,
    Trash,
    approval_commands,
    record_approval,
)
from codemode.runner import Runner
from codemode.sandbox import (
    SandboxMode,
    SandboxPolicy,
    check_policy,
    placed_identity,
)
from codemode.state import Archive, EndReason, State, compile_rules_soon
from codemode.tools import Extension, Tool, ToolDescription, ToolRegistry
from codemode.tools.bash import Notification, ProcessManager

if TYPE_CHECKING:
    from codemode._doctor import DoctorReport
    from codemode.tools.upstream import McpServerReport

log = logging.getLogger("codemode.host")


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
        self.config = host_config(config, options)
        check_id(self.config.session_id, "session_id")
        workspace = self.config.workspace.expanduser().resolve()
        if not workspace.is_dir():
            raise UserError(f"workspace {workspace} is not a directory")
        self.workspace = workspace
        self.registry = ToolRegistry()
        self.counter = TokenCounter(self.config.encoding)
        self._policy = sandbox_policy(self.config, workspace)
        self._state: State | None = None
        self.approvals = Approvals(
            approve,
            permissions=self.config.tool_permissions,
            network_default=self.config.network,
            network_allow=self.config.network_allow,
            redact=lambda text: self.archive.redactor.redact(text),
            audit=lambda request, decision: record_approval(self.state.approvals, request, decision),
            commands=approval_commands(self.command_policy, workspace),
        )
        self._processes: ProcessManager | None = None
        self._sessions = Sessions(
            self.config.session_id,
            workspace,
            self.config.tmp_quota_mb * 1024 * 1024,
            policy=lambda: self._policy,
            state=lambda: self.state,
            processes=lambda: self._processes,
            notify_in_results=self.config.notify_in_results,
            serialize_writers=self.command_policy.serialize_writers,
        )
        self.held = HeldSessions(lambda: self._processes)
        self._mounts = Mounts(
            mcp_servers, registry=self.registry, workspace=workspace, policy=lambda: self._policy
        )
        self._connect_mcp_at_open = connect_mcp_at_open
        self._runner = Runner(
            self.config,
            self.registry,
            self.counter,
            self.approvals,
            state=lambda: self.state,
            sessions=self._sessions,
            processes=lambda: self._processes,
            connect=self.connect_mcp_servers,
        )
        self.engine = self._runner.engine  # programs run on it (its limits from the config)

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
        self.engine.start_soon()  # process mode: its zygote boots while the rest opens
        self._state = state = State(
            self.config.state_dir.expanduser(),
            log_cap_bytes=self.config.log_cap_bytes,
            quota_bytes=self.config.state_quota_bytes,
            database_url=None
            if self.config.database_url is None
            else self.config.database_url.get_secret_value(),
            holder=placed_identity(),
            archive_url=None
            if self.config.archive_url is None
            else self.config.archive_url.get_secret_value(),
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
            guard = CommandGuard(self.command_policy, self.trash)
            shared = state.shared if state.is_shared else None
            self._processes = install_builtins(self.registry, state.archive, self.config, guard, shared)
        state.maintain()
        await ready_state_dir(state.archive.state_dir, self.trash.file_all)
        await self._mounts.open(state, self._connect_mcp_at_open)

    def add_mcp_server(self, name: str, server: Mapping[str, object] | None = None, **fields: Any) -> str:
        """Mount one more MCP server (``mcpServers`` fields: ``command``/``args``/``env``/``cwd``,
        or ``url``/``headers``; ``timeout``, ``sandbox``). It connects on first use.

        Returns:
            Its identifier: the program calls ``tools.<identifier>.<tool>(args)``.

        Raises:
            UserError: The fields are invalid, or the name is taken.
        """
        return self._mounts.add(name, {**(server or {}), **fields}, self._state)

    async def connect_mcp_servers(self) -> None:
        """Connect the MCP servers not tried yet (at once); one that fails says why in its
        guidance, its calls and ``mcp_servers_report``. Idempotent."""
        await self._mounts.connect()

    async def mcp_servers_report(self) -> list[McpServerReport]:
        """Each MCP server (connecting it first): reachable or why not, tool count, server
        version, transport, its log file; no env or header values."""
        return await self._mounts.report()

    def mcp_server_log(self, name: str) -> str:
        """An MCP server's log (its stderr and codemode's lines about it), redacted.

        Raises:
            UserError: No such server, or the host is not open.
        """
        return self._mounts.servers(self._state).read_log(name)

    async def aclose(self) -> None:
        """Stop foreground commands and close the state directory. Background processes survive.

        A session's temp dir (its commands' ``TMPDIR``) is removed unless the session still
        has running background processes, which keep using it.
        """
        self.engine.close()
        processes = self._processes
        # Each step runs whatever the one before did: a failure (a session dir a command made
        # unremovable, an upstream that will not stop) is logged, never skipping the rest.
        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [("MCP servers", self._mounts.aclose)]
        if processes is not None:
            # what rm moved during background runs, before the inboxes go
            steps.append(("trash filing", lambda: anyio.to_thread.run_sync(self.trash.file_all)))
        steps.append(("session temp dirs", self._sessions.remove_idle_temp_dirs))
        if processes is not None:
            steps.append(("processes", processes.aclose))
        try:
            for what, step in steps:
                try:
                    await step()
                except Exception:
                    log.exception("closing the host: %s failed; the rest still closes", what)
        finally:
            self._processes = None
            self._sessions.temp_dirs.clear()
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

    # -- tools ------------------------------------------------------------------------------

    def add_tool(self, item: Tool | Callable[..., Any], **kwargs: Any) -> Tool:
        """Register a tool (a `Tool`, or a function; keyword args as `make_tool`).

        Raises:
            UserError: The name is taken or the function cannot be described.
        """
        return self.registry.add(item, **kwargs)

    def tool(self, name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]], Tool]:
        """Decorator form of `add_tool`."""
        return lambda fn: self.registry.add(fn, name=name, **kwargs)

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
        return await self._runner.run_code(
            source,
            session_id=session_id,
            call_id=call_id,
            max_output_tokens=max_output_tokens,
            timeout_seconds=timeout_seconds,
            on_progress=on_progress,
            on_output=on_output,
        )

    # -- direct calls -----------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        args: Mapping[str, object] | None = None,
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
        return await self._runner.call_tool(
            name,
            args,
            session_id=session_id,
            call_id=call_id,
            max_output_tokens=max_output_tokens,
            on_progress=on_progress,
        )

    def search_tools(self, query: str, limit: int = 10) -> list[dict[str, str]]:
        """Ranked ``{name, description}`` for a query (what ``searchTools`` returns)."""
        return self.registry.search(query, limit=limit)

    def describe_tool(self, name: str) -> ToolDescription:
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
        return self._sessions.pending(self._sessions.check(session_id))

    def ack_notifications(self, ids: list[int], session_id: str | None = None) -> list[int]:
        """Mark notifications delivered; they are never returned again.

        Returns:
            The ids this call marked (one delivered already, by another channel, is left out).

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        return self._sessions.ack(self._sessions.check(session_id), ids)

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
        async for note in self._sessions.follow(self._sessions.check(session_id), poll_seconds):
            yield note

    async def close_session(self, session_id: str, reason: EndReason = "closed") -> None:
        """Stop the session's ``lifecycle: session`` processes, drop its temp dir and its
        standing approval decisions; a held session's end is recorded with ``reason``.

        Raises:
            UserError: ``session_id`` is not a valid id.
        """
        check_id(session_id, "session_id")
        self.approvals.forget_session(session_id)
        if self._processes is not None:
            await self._processes.close_session(session_id, reason)
        await self._sessions.drop(session_id, self.trash.file_ended if self._state is not None else None)
        self._runner.forget_session(session_id)

    def session_exists(self, session_id: str) -> bool:
        """Whether the state directory knows this session: it ran a program or a tool that
        archived text, kept a store value, or started a background process.

        Raises:
            UserError: ``session_id`` is not a valid id, or the host is not open.
        """
        return self._sessions.exists(check_id(session_id, "session_id"))

    def watch(self, watcher: Watcher | None) -> None:
        """Show every program's and direct call's spans from now on to ``watcher`` (the
        console), with their details (sources, results, arguments: never given to
        OpenTelemetry); None stops."""
        self._runner.tracing.watcher = watcher

    # -- diagnostics ------------------------------------------------------------------------

    def doctor(self) -> DoctorReport:
        """Facts for ``codemode doctor``: engine, tokenizer, state dir, sandbox."""
        state_dir = self.archive.state_dir if self._state is not None else None
        from codemode._doctor import doctor_report  # only `codemode doctor` loads it

        return doctor_report(self.config, self.counter, self._policy, state_dir)
