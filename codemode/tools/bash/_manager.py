"""The process manager: the ``bash`` tool's handler and the host's and CLI's entry points.

Background processes (``run_in_background``) run in a PTY owned by their own supervisor
process (the ``supervisor`` package), which outlives the host, writes the raw log into the archive's
blob file and records the exit and the completion notification in SQLite. Monitor watchers
are background processes too (kind ``watcher``): their supervisor turns stdout lines into
events.

A promoted run (a foreground run handed off after ``handoff_seconds``) stays the same piped
process; at the hand-off its pipes go to a new supervisor, which traces the command to learn
its exit status (the host stays its parent), so it outlives this host like a background
process and the next host can read and stop it. Where that cannot be done (tracing refused,
no supervisor), the run is not promoted: it keeps its foreground wait, to its timeout.

Notifications (completions, keyword reports, watcher events) are delivered once per session:
whoever acknowledges one first (a result's trailer, ``Host.notifications``, a ``read`` or
``wait`` that showed the exit, a watcher's events read) is the only one to deliver it.

The manager holds the state and the ``bash`` tool's handler; each concern is a mixin in a module
of its own: the records and their reconcile (``_table``), starts and hand-offs (``_starting``),
reads and waits (``_reading``), Monitor watchers (``_watchers``), write, stop and update
(``_stopping``), upkeep and reaping (``_reaping``), notifications (``_completions``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import anyio
import anyio.to_thread

from codemode.errors import ErrorCode, ToolError, UserError
from codemode.sandbox import SandboxMode, SandboxPolicy, check_policy, check_share, is_mounted
from codemode.state import Archive, Redactor, SqlDatabase
from codemode.state import process_records as _records
from codemode.tools._model import Extension, TextContent, ToolContext, ToolResult
from codemode.tools.bash._answers import ProcessRow
from codemode.tools.bash._answers import WatcherData as WatcherData
from codemode.tools.bash._completions import Completions, QuietSessions
from codemode.tools.bash._elsewhere import Elsewhere
from codemode.tools.bash._env import resolve_cwd
from codemode.tools.bash._foreground import (
    CGROUPS,
    Running,
    RunSpec,
    host_cgroup_owner,
    run_foreground,
    state_tag,
)
from codemode.tools.bash._gate import CommandGate
from codemode.tools.bash._limits import DEFAULT_TIMEOUT_SECONDS
from codemode.tools.bash._reading import MAX_EVENTS_PER_READ as MAX_EVENTS_PER_READ
from codemode.tools.bash._reading import Reading, _read_text
from codemode.tools.bash._reading import wait_text as wait_text
from codemode.tools.bash._reaping import Reaping
from codemode.tools.bash._starting import Starting
from codemode.tools.bash._stopping import Stopping
from codemode.tools.bash._table import ProcessTable
from codemode.tools.bash._watchers import Watchers

# MAX_EVENTS_PER_READ, wait_text and WatcherData are re-exported (``as``): the monitor's tools import them from
# here, the bash module their import contract names.

if TYPE_CHECKING:
    from codemode.tools.bash._tool import BashArgs, BashRunArgs


def escalates(args: BashRunArgs) -> bool:
    """Whether the run leaves the sandbox: ``sandbox: false``, or argv ``["sudo", ...]`` (the
    host's approvals asked a person about this very call before it got here)."""
    return args.sandbox is False or (args.argv is not None and args.argv[0] == "sudo")


def sudo_argv(argv: list[str], environ: Mapping[str, str], policy: SandboxPolicy) -> tuple[str, ...]:
    """``["sudo", PROGRAM, ...]`` as it runs: ``/path/of/sudo -n PROGRAM ...``, sudo found on the
    commands' PATH but never in a place confined commands can write (a planted ``sudo`` would
    run unconfined under the name the person allowed).

    Raises:
        ToolError: No sudo on PATH, or the one found lies in a writable root.
    """
    found = shutil.which("sudo", path=environ.get("PATH", os.defpath))
    if found is None:
        raise ToolError(
            "sudo is not installed on this host (not on PATH); ask the user to run the command",
            code=ErrorCode.SPAWN_FAILED,
        )
    real = os.path.realpath(found)
    if not os.path.isabs(found) or any(
        real == str(root) or real.startswith(str(root).rstrip("/") + "/") for root in policy.all_writable()
    ):
        raise ToolError(
            f"the sudo found on PATH ({found}) lies where commands can write, so it is not run; ask "
            "the user to check PATH",
            code=ErrorCode.DENIED_BY_POLICY,
        )
    return (found, "-n", *argv[1:])


def _with_capabilities(ctx: ToolContext, args: BashRunArgs) -> SandboxPolicy:
    """The call's policy: the host's, plus the per-call capabilities it asked for (``network``:
    on, or an allowlist; ``write_paths``). The host's approvals decided on them before the call got here (without an
    approval callback, asking for more than the host allows is refused there).

    Raises:
        ToolError: A write path does not exist, is not a directory, or would make the state
            directory writable (code ``denied_by_sandbox``).
    """
    policy = ctx.policy
    if args.network is True and (not policy.network or policy.network_allow is not None):
        policy = replace(policy, network=True, network_allow=None)
    elif args.network is not None and not isinstance(args.network, bool):
        # An allowlist: it narrows the host's network, or (approved) widens it to these domains.
        policy = replace(policy, network=True, network_allow=tuple(args.network.allow))
    for raw in args.write_paths or ():
        path = (ctx.workspace / raw).resolve() if not os.path.isabs(raw) else Path(raw).resolve()
        if not path.is_dir():
            raise ToolError(
                f"write_paths: {raw!r} is not an existing directory; create it first or name its parent",
                {"path": raw},
                code=ErrorCode.DENIED_BY_SANDBOX,
            )
        policy = policy.with_root(path)
    if policy is not ctx.policy:
        try:
            check_policy(policy)
        except UserError as exc:
            raise ToolError(
                str(exc), {"write_paths": args.write_paths}, code=ErrorCode.DENIED_BY_SANDBOX
            ) from exc
    return policy


class BackgroundSettings(TypedDict):
    """What a background run's supervisor keeps an eye on (kept in its record's ``options``)."""

    report_on: list[str]
    timeout_seconds: int | None


DEFAULT_REPORT_ON = (
    "error", "err!", "fail", "fatal", "panic", "exception", "traceback", "segmentation fault",
    "core dumped", "out of memory", "permission denied", "command not found", "no such file",
)  # fmt: skip
"""Keywords a background run reports by default (case-insensitive)."""


def background_settings(report_on: list[str] | None, timeout_seconds: int | None) -> BackgroundSettings:
    """What a background run's supervisor keeps an eye on: keywords and its lifetime."""
    return {
        "report_on": list(DEFAULT_REPORT_ON if report_on is None else report_on),
        "timeout_seconds": timeout_seconds,
    }


class ProcessManager(ProcessTable, Starting, Reading, Watchers, Stopping, Reaping, Completions, Elsewhere):
    """Runs commands for the ``bash`` tool and owns the records of background processes.

    Args:
        archive: The host's archive (logs, SQLite records).
        handoff_seconds: A foreground run still going after ``min(handoff_seconds, timeout)``
            moves to the background; None switches hand-off off (runs wait to their timeout).
        max_background_per_session: Cap on live background processes per session.
        max_watchers_per_session: Cap on live Monitor watchers per session.
        redactor: Redacts text before it is returned (default: the archive's redactor).
        environ: The environment commands start from (default ``os.environ``).
        command_gate: Checks every run first (the host's command policy); None checks nothing.
        tmp_share_bytes: A session whose counted (not tmpfs) ``$TMPDIR`` holds more is refused
            new runs (`codemode.sandbox.check_share`); None checks nothing.
        sessions: Where held sessions and resume secrets are recorded when hosts on several
            machines share them (`codemode.state.State.shared`); None: the state directory.
            With it, processes and notifications cross machines (`Elsewhere`).

    Raises:
        StateDirError: The records cannot be opened (from the archive).
    """

    def __init__(
        self,
        archive: Archive,
        *,
        handoff_seconds: float | None = 10.0,
        max_background_per_session: int = 32,
        max_watchers_per_session: int = 128,
        redactor: Redactor | None = None,
        environ: Mapping[str, str] | None = None,
        command_gate: CommandGate | None = None,
        tmp_share_bytes: int | None = None,
        sessions: SqlDatabase | None = None,
    ) -> None:
        self._gate = command_gate
        self._tmp_share = tmp_share_bytes
        self._archive = archive
        self._sessions = sessions
        self._handoff = handoff_seconds
        self._max_background = max_background_per_session
        self._max_watchers = max_watchers_per_session
        self._redactor = redactor if redactor is not None else archive.redactor
        self._environ = dict(environ if environ is not None else os.environ)
        self._foreground: set[Running] = set()
        # Promoted runs this host started: it stays their parent, so it reaps them.
        self._adopted: dict[str, Running] = {}
        # Cgroups of finished foreground runs that left processes running, per session.
        self._leftovers: dict[str, set[str]] = {}
        # Background processes started with a network allowlist: what the proxy refused each.
        self._network_refusals: dict[str, tuple[list[str], SandboxPolicy]] = {}
        # Processes whose terminal a person has taken over (the console): who, as shown.
        self._taken_over: dict[str, str] = {}
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._db_lock = threading.RLock()
        self._conn = _records.connect(archive.db_path)
        self._quiet = QuietSessions(archive.db_path)  # sessions with nothing live or pending
        self._closed = False
        self._start_listening()
        self.maintain()

    def extension(self) -> Extension:
        """The ``bash`` tool and its guidance for the run_code description."""
        from codemode.tools.bash._packages import find_package_manager
        from codemode.tools.bash._tool import bash_tool, guidance

        manager = find_package_manager(self._environ)
        install = manager.describe() if manager is not None else None
        return Extension(
            name="bash",
            tools=[bash_tool(self._handle, self._handoff, install)],
            guidance=guidance(self._handoff, self._gate is not None and self._gate.serialize_writers),
        )

    async def _handle(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
        from codemode.tools.bash._tool import (
            BashListArgs,
            BashReadArgs,
            BashRunArgs,
            BashStopArgs,
            BashUpdateArgs,
            BashWaitArgs,
            BashWriteArgs,
        )

        session = ctx.session_id
        match args.root:
            case BashRunArgs() as run:
                return await self._run(run, ctx)
            case BashListArgs():
                rows = await anyio.to_thread.run_sync(self.list_processes, session)
                return ToolResult.from_text(_list_text(rows, self._redactor), {"processes": rows})
            case BashReadArgs(process_id=pid) as read:
                data = await self.read(session, pid, read.offset_bytes or 0, read.max_bytes, read.wait_ms)
                return ToolResult.from_text(_read_text(data), data)
            case BashWriteArgs(process_id=pid, input=text):
                if self._gate is not None:
                    self._gate.check_input(text)
                written = await self.write(session, pid, text)
                return ToolResult.from_text(f"Wrote {written['bytes']} bytes to {pid}.", written)
            case BashStopArgs(process_id=pid):
                stopped = await self.stop(session, pid)
                return ToolResult.from_text(stopped["message"], stopped)
            case BashUpdateArgs(process_id=pid, completion_mode=mode):
                updated = await anyio.to_thread.run_sync(self._update, session, pid, mode)
                return ToolResult.from_text(updated["message"], updated)
            case BashWaitArgs(process_id=pid) as wait:
                until = wait.until if isinstance(wait.until, str) else {"pattern": wait.until.pattern}
                waited = await self.wait(session, pid, until, wait.timeout_ms, wait.offset_bytes or 0)
                return ToolResult.from_text(wait_text(waited), waited)
        raise AssertionError(f"unhandled bash arguments {type(args.root).__name__}")  # pragma: no cover

    def _spec(self, args: BashRunArgs, ctx: ToolContext) -> RunSpec:
        escalated = escalates(args)
        spec = self.run_spec(
            args.command,
            args.cwd,
            ctx,
            argv=args.argv,
            shown=args.shown,
            background=bool(args.run_in_background),
            timeout_seconds=args.timeout_seconds,
            purpose=args.purpose,
            scope=args.scope,
            lifecycle=args.lifecycle,
            completion_mode=args.completion_mode,
            # Outside every layer: network and write_paths no longer apply.
            policy=ctx.policy.with_mode(SandboxMode.FULL_ACCESS)
            if escalated
            else _with_capabilities(ctx, args),
        )
        if args.argv is not None and args.argv[0] == "sudo":
            direct = sudo_argv(args.argv, spec.environ, ctx.policy)
            spec = replace(spec, direct=None if spec.direct is None else direct, command=shlex.join(direct))
        return spec

    def run_spec(
        self,
        command: str | None,
        cwd: str | None,
        ctx: ToolContext,
        *,
        argv: list[str] | None = None,
        shown: str | None = None,
        background: bool = True,
        timeout_seconds: int | None = None,
        purpose: str | None = None,
        scope: str | None = None,
        lifecycle: str | None = None,
        completion_mode: str | None = None,
        policy: SandboxPolicy | None = None,
    ) -> RunSpec:
        """A validated request to run ``command`` (or ``argv``) in ``cwd`` for the calling
        session, under ``policy`` (default the call's), checked by the host's command policy.

        Raises:
            ToolError: The command holds a NUL, the cwd is outside the workspace or missing, or
                the command policy refuses it.
        """
        if any("\x00" in word for word in (argv or [command or ""])):
            raise ToolError(
                "the command contains a NUL character, which no shell command line can hold; remove it "
                "(use printf '\\0' to produce one)",
                code=ErrorCode.BAD_COMMAND,
            )
        policy = policy or ctx.policy
        resolved = resolve_cwd(cwd, ctx.workspace, policy)
        environ = self._environ
        direct = tuple(argv) if argv is not None else None
        shell_fallback = False
        writes = True  # without a gate nothing is classified: every run may change things
        if self._gate is not None:
            plan = self._gate.plan(command=command, argv=argv, cwd=resolved, background=background, ctx=ctx)
            if plan.env or plan.path_prepend:
                environ = {**environ, **plan.env}
                if plan.path_prepend:
                    environ["PATH"] = os.pathsep.join((*plan.path_prepend, environ.get("PATH", os.defpath)))
            if direct is None and plan.direct is not None:
                direct, shell_fallback = plan.direct, True
            writes = plan.writes
        return RunSpec(
            command=shown or command or "",
            cwd=resolved,
            direct=None if background else direct,
            shell_fallback=shell_fallback,
            timeout_seconds=timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
            session_id=ctx.session_id,
            policy=policy,
            purpose=purpose,
            scope=scope,
            lifecycle=lifecycle or "session",
            completion_mode=completion_mode or "resume",
            environ=environ,
            call_id=ctx.call_id,
            writes=writes,
        )

    def _prepare(self, args: BashRunArgs, ctx: ToolContext) -> RunSpec:
        """The run's spec, checked (blocking: the command policy may read script files in the
        workspace, the gate sets up the rm shim and its inbox, the share check walks a counted
        ``$TMPDIR``; all of it command-writable, so never on the event loop).

        Raises:
            ToolError: The spec is invalid, the policy refuses it or ``$TMPDIR`` is over its share.
        """
        spec = self._spec(args, ctx)
        temp = spec.policy.temp_dir
        if self._tmp_share is not None and temp is not None and not is_mounted(temp):
            check_share(temp, self._tmp_share, spec.command)
        return spec

    async def _run(self, args: BashRunArgs, ctx: ToolContext) -> ToolResult:
        # Its place in the session's line is taken now, in the order calls came; a run that
        # only looks leaves it once classified, a writer waits there for the writers before it
        # and holds the turn to its end (a background run: until it has started).
        place = ctx.writers.enter() if ctx.writers is not None else None
        try:
            spec = await anyio.to_thread.run_sync(self._prepare, args, ctx)
            if place is not None:
                if spec.writes:
                    await place.wait()
                else:
                    place.leave()
            return await self._run_spec(spec, args, ctx)
        finally:
            if place is not None:
                place.leave()

    async def _run_spec(self, spec: RunSpec, args: BashRunArgs, ctx: ToolContext) -> ToolResult:
        if args.run_in_background:
            # Shielded: once started, the process runs whatever happens to this call, so the
            # call finishes and says which process it started (also when its program ended
            # without awaiting it: the host then reports what it did, not "cancelled").
            settings = background_settings(args.report_on, args.timeout_seconds)
            with anyio.CancelScope(shield=True):
                data = await anyio.to_thread.run_sync(self._start_background, spec, settings)
            pid = data["process_id"]
            text = (
                f"Started in the background as process {pid}. Read its output with "
                f'bash({{action: "read", process_id: "{pid}", wait_ms: 5000}}) or wait for it with '
                f'bash({{action: "wait", process_id: "{pid}"}}); stop it with '
                f'bash({{action: "stop", process_id: "{pid}"}}).'
            )
            if args.timeout_seconds is not None:
                text += f" It is stopped after {args.timeout_seconds} s (timeout_seconds)."
            return ToolResult.from_text(text, data)
        outcome = await run_foreground(
            spec,
            archive=self._archive,
            redactor=self._redactor,
            # A program waits for its answer (up to the command's timeout and its own limit);
            # only a direct call, where a model is waiting, hands long commands off.
            handoff_seconds=self._handoff if ctx.program is None else None,
            promote=self._promote,
            track=self._track,
            program=ctx.program,
        )
        # One content block per part, so that a budget cut keeps each stream's head and tail.
        content = [TextContent(text=block) for block in outcome.blocks]
        # Filing the trash reads (and may copy) what the command wrote: off the event loop.
        after = await anyio.to_thread.run_sync(self._gate.finished, ctx) if self._gate is not None else None
        if after is not None:
            content.append(TextContent(text=after.text))
            outcome.structured.update(after.data)
        return ToolResult(content=content, structured_content=outcome.structured, is_error=outcome.is_error)

    def output_bytes(self, session_id: str, call_id: str) -> int:
        """Bytes the session's foreground commands started by this call have output so far
        (for progress reports; commands handed to the background are no longer counted)."""
        with self._lock:
            runs = list(self._foreground)
        return sum(
            r.pump.bytes_read for r in runs if r.spec.session_id == session_id and r.spec.call_id == call_id
        )

    async def aclose(self) -> None:
        """Host shutdown: stop foreground runs; background processes, watchers and promoted
        runs live on (their supervisors read them)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runs = list(self._foreground)
        self._stop_listening()
        for running in runs:
            running.pump.wake()
        self._reap_adopted()
        with anyio.CancelScope(shield=True):
            deadline = time.monotonic() + 10
            while self._foreground and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(self._end_leftovers, None)
            if CGROUPS.keeps_any():  # naming the owner reads this process's start time (psutil)
                CGROUPS.clear(host_cgroup_owner(state_tag(self._archive)))
        with self._db() as conn:
            conn.close()
        self._quiet.close()


def _list_text(rows: list[ProcessRow], redactor: Redactor) -> str:
    if not rows:
        return "No background processes in this session."
    lines = []
    for row in rows:
        code = "" if row["exit_code"] is None else f" exit {row['exit_code']}"
        command = redactor.one_line(row["command"], 60)
        lines.append(
            f"{row['process_id']}  {row['state']}{code}  started {row['started']}  "
            f"log {row['log_bytes']} B  {command}"
        )
    return "\n".join(lines)
