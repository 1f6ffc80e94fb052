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
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from codemode.errors import ErrorCode, ProcessNotFound, ToolError, UserError
from codemode.sandbox import SandboxPolicy, cgroup_kill, cgroup_remove, check_policy, check_share, is_mounted
from codemode.state import Archive, ProcessRecord, Redactor
from codemode.state import process_records as _records
from codemode.tools._model import Extension, TextContent, ToolContext, ToolResult
from codemode.tools._terminal import clean_terminal_text, terminal_view
from codemode.tools.bash._background import PTY_VIEW, adopt, start_background
from codemode.tools.bash._completions import Completions
from codemode.tools.bash._env import resolve_cwd
from codemode.tools.bash._foreground import (
    CGROUPS,
    TERM_GRACE_SECONDS,
    Running,
    RunSpec,
    _classify,
    host_cgroup_owner,
    orphaned_foreground_cgroups,
    orphaned_foreground_markers,
    run_foreground,
    state_tag,
)
from codemode.tools.bash._gate import CommandGate
from codemode.tools.bash._limits import DEFAULT_READ_BYTES, DEFAULT_TIMEOUT_SECONDS, DEFAULT_WAIT_MS
from codemode.tools.bash._proctree import create_time, is_same_process, own_create_time, terminate_tree

if TYPE_CHECKING:
    from codemode.tools._verification import Verification
    from codemode.tools.bash._tool import BashArgs, BashRunArgs

_EXPIRE_SECONDS = 30 * 24 * 3600


def _with_capabilities(ctx: ToolContext, args: BashRunArgs) -> SandboxPolicy:
    """The call's policy: the host's, plus the per-call capabilities it asked for (``network``,
    ``write_paths``). The host's approvals decided on them before the call got here (without an
    approval callback, asking for more than the host allows is refused there).

    Raises:
        ToolError: A write path does not exist, is not a directory, or would make the state
            directory writable (code ``denied_by_sandbox``).
    """
    policy = ctx.policy
    if args.network and not policy.network:
        policy = replace(policy, network=True)
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


_POLL_SECONDS = 0.005
_LIVENESS_SECONDS = 0.25
_RECORD_END_WAIT_SECONDS = 5.0
# A waiting read returns once output has been quiet this long (never on a burst's first byte),
# or once this much new output is there (of ``max_bytes``): a fast log must not outrun the
# reader past its cap, which keeps only its head and its tail.
QUIET_SECONDS = 0.2
_PACED_BYTES = 256 * 1024
# How much of a log's end the verification summary is read from.
_VERIFY_TAIL_BYTES = 64 * 1024
# A watcher's events come back at most this many at a time.
MAX_EVENTS_PER_READ = 200


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _not_found(process_id: str, what: str = "process") -> ProcessNotFound:
    hint = (
        "monitor_list() shows this session's watchers"
        if what == "watcher"
        else 'bash({action: "list"}) shows this session\'s processes'
    )
    return ProcessNotFound(
        f"no such {what} {process_id!r} in this session; {hint}",
        {"error": "no_such_watcher" if what == "watcher" else "no_such_process", "process_id": process_id},
    )


def _compile(pattern: str) -> re.Pattern[str]:
    """The ``until`` pattern as a regular expression.

    Raises:
        ToolError: It is not a valid one.
    """
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ToolError(
            f"until.pattern {pattern!r} is not a valid regular expression: {exc}; escape special "
            "characters (e.g. \\. for a dot)",
            {"error": "bad_pattern"},
        ) from None


def _summary(verification: Verification) -> str | None:
    """The line a completion gets: the failure summary, else the runner's own summary."""
    from codemode.tools._verification import failure_summary

    failed = failure_summary(verification)
    if failed:
        return failed
    if verification.summary_line:
        return f"{verification.tool}: {verification.summary_line}"
    return None


DEFAULT_REPORT_ON = (
    "error", "err!", "fail", "fatal", "panic", "exception", "traceback", "segmentation fault",
    "core dumped", "out of memory", "permission denied", "command not found", "no such file",
)  # fmt: skip
"""Keywords a background run reports by default (case-insensitive)."""


def background_settings(report_on: list[str] | None, timeout_seconds: int | None) -> dict[str, Any]:
    """What a background run's supervisor keeps an eye on: keywords and its lifetime."""
    return {
        "report_on": list(DEFAULT_REPORT_ON if report_on is None else report_on),
        "timeout_seconds": timeout_seconds,
    }


def wait_text(data: dict[str, Any]) -> str:
    """The text of a ``wait`` result."""
    pid = data["process_id"]
    cursor = "after" if data.get("kind") == "watcher" else "offset_bytes"
    where = f"next {cursor} {data['next_offset']}"
    code = "unknown" if data["exit_code"] is None else data["exit_code"]
    if data["reason"] == "pattern":
        text = f'[{pid}: a line matched /{data["pattern"]}/ after {data["waited_ms"]} ms: "{data["line"]}"; {where}]'
    elif data["reason"] == "exit":
        text = f"[{pid} {data['state']}, exit code {code} (waited {data['waited_ms']} ms); {where}]"
    else:
        what = f"no new line matched /{data['pattern']}/" if data.get("pattern") else "it did not exit"
        text = f"[{pid}: timed out after {data['waited_ms']} ms: {what}; still {data['state']}; {where}]"
    verification = data.get("verification")
    if verification and verification.get("summary_line"):
        text += f"\n{verification['tool']}: {verification['summary_line']}"
    return text


class ProcessManager(Completions):
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
    ) -> None:
        self._gate = command_gate
        self._tmp_share = tmp_share_bytes
        self._archive = archive
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
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._db_lock = threading.RLock()
        self._conn = _records.connect(archive.db_path)
        self._db_uses = 0  # uses of the connection, each maybe a write (see pending_notifications)
        # (session, data_version, uses) when that session last had nothing live or pending.
        self._quiet: tuple[str, int, int] | None = None
        self._closed = False
        self.maintain()

    # ------------------------------------------------------------------ plumbing

    @property
    def _me(self) -> tuple[int, float | None]:
        """This host as a supervisor record names it: pid and start time (read at first use)."""
        return os.getpid(), own_create_time()

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._db_lock:
            self._db_uses += 1
            yield self._conn

    def _get(self, session_id: str, process_id: str) -> ProcessRecord:
        with self._db() as conn:
            record = _records.get(conn, process_id)
        if record is None or record.session_id != session_id:
            raise _not_found(process_id)
        return self._reconcile(record)

    def _supervisor_alive(self, record: ProcessRecord) -> bool:
        if (record.supervisor_pid, record.supervisor_started) == self._me:
            # A promoted run this host is handing to its supervisor right now.
            return record.process_id in self._adopted
        if record.supervisor_pid is None or record.supervisor_started is None:
            # Still starting: give the supervisor time to record itself.
            return time.time() - record.started_at < 60
        return is_same_process(record.supervisor_pid, record.supervisor_started)

    def _reconcile(self, record: ProcessRecord) -> ProcessRecord:
        """Mark a live record whose supervisor is gone as lost (exit code unknown)."""
        if not record.live or self._supervisor_alive(record):
            return record
        with self._db() as conn:
            # The supervisor may have recorded the end just before it went: read again.
            fresh = _records.get(conn, record.process_id)
            if fresh is not None and fresh.live:
                note = "; its supervisor ended without recording an exit"
                _records.record_end(
                    conn,
                    record.process_id,
                    exit_code=None,
                    exit_signal=None,
                    state="lost",
                    note=note,
                    error="supervisor gone",
                )
            fresh = _records.get(conn, record.process_id)
        assert fresh is not None
        if fresh.state == "lost":
            # Nothing reads its output any more: end what is left of it (found by its marker).
            root = _live_root(record)
            terminate_tree(
                record.marker,
                pgid=root,
                root_pid=root,
                grace_seconds=TERM_GRACE_SECONDS,
                cgroup=record.cgroup,
            )
        return fresh

    def maintain(self) -> dict[str, int]:
        """Start-up upkeep: reconcile records, finish and pin logs, expire old records (also
        safe later). Run it before the archive's own upkeep (`State.maintain`).

        Terminal records older than 30 days are removed with their logs unless a completion
        is still undelivered; logs of undelivered completions are pinned so the archive's
        compaction and expiry leave them alone.

        Foreground commands left running by a host that died are ended too (found by the
        marker variable, which names their host's pid and start time).

        Returns:
            Counts: ``lost`` (records reconciled), ``expired`` (records removed), ``orphans``
            (foreground commands of dead hosts ended).
        """
        counts = {"lost": 0, "expired": 0, "orphans": 0}
        with self._db() as conn:
            live = _records.live_records(conn)
        kept_markers: set[str] = set()
        kept_cgroups: set[str] = set()
        for record in live:
            fresh = self._reconcile(record)
            if fresh.state == "lost":
                counts["lost"] += 1
            elif fresh.live:
                # A promoted run outlives the host that started it (its supervisor reads it).
                kept_markers.add(record.marker)
                if record.cgroup:
                    kept_cgroups.add(record.cgroup)
        # Foreground commands of a host that died (SIGKILL) have no reader left: end them.
        # Only those of this state directory: another's promoted runs are recorded only there.
        tag = state_tag(self._archive)
        for marker in orphaned_foreground_markers(tag):
            if marker not in kept_markers:
                terminate_tree(marker, grace_seconds=TERM_GRACE_SECONDS)
                counts["orphans"] += 1
        for cgroup in orphaned_foreground_cgroups(tag):
            if cgroup not in kept_cgroups:
                counts["orphans"] += bool(cgroup_kill(cgroup))
                cgroup_remove(cgroup)
        cutoff = time.time() - _EXPIRE_SECONDS
        with self._db() as conn:
            pending_ids = {
                row["process_id"]
                for row in conn.execute("SELECT process_id FROM notifications WHERE delivered_at IS NULL")
            }
            records = _records.for_session(conn, None)
        for record in records:
            if record.live or record.log_ref is None:
                continue
            if not self._log_finished(record.log_ref):
                with contextlib.suppress(ToolError):
                    self._archive.finish_log(record.log_ref)
            with contextlib.suppress(ToolError):
                self._archive.pin(record.log_ref, record.process_id in pending_ids)
            if (record.ended_at or record.started_at) < cutoff and record.process_id not in pending_ids:
                with self._db() as conn:
                    conn.execute("DELETE FROM bash_processes WHERE process_id = ?", (record.process_id,))
                    conn.execute(
                        "DELETE FROM notifications WHERE process_id = ? AND delivered_at IS NOT NULL",
                        (record.process_id,),
                    )
                counts["expired"] += 1
        return counts

    def _log_finished(self, ref: str) -> bool:
        try:
            return self._archive.entry_info(ref).get("finished") is not None
        except ToolError:
            return True  # expired: nothing to finish

    # ------------------------------------------------------------------ the tool

    def extension(self) -> Extension:
        """The ``bash`` tool and its guidance for the run_code description."""
        from codemode.tools.bash._tool import bash_tool, guidance

        return Extension(
            name="bash", tools=[bash_tool(self._handle, self._handoff)], guidance=guidance(self._handoff)
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
                data = await self.write(session, pid, text)
                return ToolResult.from_text(f"Wrote {data['bytes']} bytes to {pid}.", data)
            case BashStopArgs(process_id=pid):
                data = await self.stop(session, pid)
                return ToolResult.from_text(data["message"], data)
            case BashUpdateArgs(process_id=pid, completion_mode=mode):
                data = await anyio.to_thread.run_sync(self._update, session, pid, mode)
                return ToolResult.from_text(data["message"], data)
            case BashWaitArgs(process_id=pid) as wait:
                until = wait.until if isinstance(wait.until, str) else {"pattern": wait.until.pattern}
                data = await self.wait(session, pid, until, wait.timeout_ms, wait.offset_bytes or 0)
                return ToolResult.from_text(wait_text(data), data)
        raise AssertionError(f"unhandled bash arguments {type(args.root).__name__}")  # pragma: no cover

    def _spec(self, args: BashRunArgs, ctx: ToolContext) -> RunSpec:
        return self.run_spec(
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
            policy=_with_capabilities(ctx, args),
        )

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
                {"error": "bad_command"},
            )
        policy = policy or ctx.policy
        resolved = resolve_cwd(cwd, ctx.workspace, policy)
        environ = self._environ
        direct = tuple(argv) if argv is not None else None
        shell_fallback = False
        if self._gate is not None:
            plan = self._gate.plan(command=command, argv=argv, cwd=resolved, background=background, ctx=ctx)
            if plan.env or plan.path_prepend:
                environ = {**environ, **plan.env}
                if plan.path_prepend:
                    environ["PATH"] = os.pathsep.join((*plan.path_prepend, environ.get("PATH", os.defpath)))
            if direct is None and plan.direct is not None:
                direct, shell_fallback = plan.direct, True
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
        spec = await anyio.to_thread.run_sync(self._prepare, args, ctx)
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

    # ------------------------------------------------------------------ starting

    def _check_cap(self, session_id: str, kind: str = "background") -> bool:
        """Whether the session may start one more background process (or watcher: ``kind``)."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        watchers = kind == "watcher"
        count = sum(1 for r in live if (r.kind == "watcher") == watchers and self._reconcile(r).live)
        return count < (self._max_watchers if watchers else self._max_background)

    def _start_background(self, spec: RunSpec, settings: dict[str, Any] | None = None) -> dict[str, Any]:
        process_id = f"p_{secrets.token_hex(6)}"
        with self._start_lock:  # the cap check and the start are one step
            if not self._check_cap(spec.session_id):
                raise ToolError(
                    f"this session already has {self._max_background} background processes running (the "
                    'cap); stop one with bash({action: "stop", process_id}) or wait for one to finish',
                    {"error": "background_cap", "cap": self._max_background},
                )
            answer = start_background(
                spec, process_id=process_id, archive=self._archive, db=self._db, settings=settings
            )
        return {
            "process_id": process_id,
            "state": "running",
            "pid": answer["pid"],
            "command": spec.command,
            "cwd": str(spec.cwd),
            "lifecycle": spec.lifecycle,
            "completion_mode": spec.completion_mode,
            "log": {"ref": answer["log_ref"]},
            "purpose": spec.purpose,
            "scope": spec.scope,
        }

    def _track(self, running: Running, active: bool) -> None:
        with self._lock:
            if active:
                self._foreground.add(running)
                if self._closed:  # started while shutting down: stop it at once
                    running.pump.wake()
            else:
                self._foreground.discard(running)
                # A finished run's cgroup goes, unless processes it left behind still run
                # there: those belong to the session and end with it (or with this host).
                if running.proc.returncode is not None and not running.release_cgroup():
                    self._leftovers.setdefault(running.spec.session_id, set()).add(running.proc.cgroup or "")

    def _promote(self, running: Running) -> str | None:
        """Hand a still-running foreground command to a supervisor of its own (worker thread).

        The supervisor gets the pipes and traces the command for its exit status, so the run
        outlives this host. Returns None (no promotion: the caller keeps waiting) when that
        cannot be done.
        """
        spec = running.spec
        pump = running.pump
        if self._closed or pump.exited or not pump.pipes() or not self._check_cap(spec.session_id):
            return None
        started = create_time(running.proc.pid)
        if started is None:
            return None
        process_id = f"p_{secrets.token_hex(6)}"
        writer = running.log.stream()  # readable while it grows; the supervisor appends to it
        # Tracked before the record exists, so no reconcile can take it for a lost one.
        with self._lock:
            self._adopted[process_id] = running
        with self._db() as conn:
            _records.insert(
                conn,
                process_id=process_id,
                kind="promoted",
                marker=running.marker,
                state="running",
                pid=running.proc.pid,
                pid_started=started,
                supervisor_pid=self._me[0],
                supervisor_started=self._me[1],
                log_path=str(writer.path),
                log_ref=writer.ref,
                input_path=None,
                cgroup=running.proc.cgroup,
                started_at=running.started_wall,
                **spec.record_fields(),
            )
        answer = adopt(
            process_id=process_id,
            pid=running.proc.pid,
            pid_started=started,
            pipes=pump.pipes(),
            log_path=str(writer.path),
            cgroup=running.proc.cgroup,
            command=spec.command,
            archive=self._archive,
        )
        if not answer.get("ok"):
            with self._db() as conn:
                conn.execute("DELETE FROM bash_processes WHERE process_id = ?", (process_id,))
            with self._lock:
                self._adopted.pop(process_id, None)
            return None
        pump.hand_off()
        writer.detach()
        return process_id

    def _reap_adopted(self) -> None:
        """Reap promoted runs this host started once they have exited (their supervisor
        recorded the status; this host is still their parent)."""
        with self._lock:
            items = list(self._adopted.items())
        for process_id, running in items:
            if running.proc.poll() is not None:
                running.pump.close()
                with self._lock:
                    self._adopted.pop(process_id, None)

    # ------------------------------------------------------------------ control actions

    def owner_of(self, process_id: str) -> str | None:
        """The session that owns ``process_id`` (for the CLI, where the person acts as owner)."""
        with self._db() as conn:
            record = _records.get(conn, process_id)
        return None if record is None else record.session_id

    def list_processes(self, session_id: str | None, *, watchers: bool = False) -> list[dict[str, Any]]:
        """The processes of one session (or, for the CLI, of all sessions), oldest first;
        Monitor watchers only with ``watchers``."""
        with self._db() as conn:
            records = _records.for_session(conn, session_id)
        return [self._describe(self._reconcile(r)) for r in records if watchers or r.kind != "watcher"]

    # ------------------------------------------------------------------ Monitor watchers

    def start_watcher(self, spec: RunSpec, options: dict[str, Any]) -> dict[str, Any]:
        """Start a Monitor watcher: ``spec.command`` under a supervisor, its complete stdout
        lines this session's events (blocking).

        Raises:
            ToolError: The session has its cap of live watchers, or it could not start.
        """
        process_id = f"w_{secrets.token_hex(6)}"
        with self._start_lock:
            if not self._check_cap(spec.session_id, "watcher"):
                raise ToolError(
                    f"this session already has {self._max_watchers} watchers running (the cap); stop one "
                    "with monitor_stop({watcher_id})",
                    {"error": "watcher_cap", "cap": self._max_watchers},
                )
            start_background(
                spec,
                process_id=process_id,
                archive=self._archive,
                db=self._db,
                kind="watcher",
                settings=options,
            )
        return self.watcher(spec.session_id, process_id)

    def watcher(self, session_id: str, watcher_id: str) -> dict[str, Any]:
        """One watcher, described (state, options, event count).

        Raises:
            ProcessNotFound: No such watcher in this session.
        """
        record = self._get_watcher(session_id, watcher_id)
        with self._db() as conn:
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM notifications WHERE process_id = ? AND kind = 'event'", (watcher_id,)
            ).fetchone()
        options = json.loads(record.options) if record.options else {}
        return {
            "watcher_id": record.process_id,
            "description": options.get("description"),
            "command": record.command,
            "state": record.state,
            "started": _iso(record.started_at),
            "ended": _iso(record.ended_at),
            "exit_code": record.exit_code,
            "events": int(count),
            "options": {k: v for k, v in options.items() if k != "description"},
            "log_ref": record.log_ref,
        }

    def _get_watcher(self, session_id: str, watcher_id: str) -> ProcessRecord:
        try:
            record = self._get(session_id, watcher_id)
        except ProcessNotFound:
            record = None
        if record is None or record.kind != "watcher":
            raise _not_found(watcher_id, "watcher")
        return record

    def list_watchers(self, session_id: str) -> list[dict[str, Any]]:
        """The session's watchers, oldest first."""
        with self._db() as conn:
            records = [r for r in _records.for_session(conn, session_id) if r.kind == "watcher"]
        for record in records:
            self._reconcile(record)
        return [self.watcher(session_id, r.process_id) for r in records]

    async def events(
        self,
        session_id: str,
        watcher_id: str,
        after: int = 0,
        limit: int = MAX_EVENTS_PER_READ,
        wait_ms: int = 0,
    ) -> dict[str, Any]:
        """A watcher's events numbered above ``after``, waiting up to ``wait_ms`` for one; the
        events returned count as delivered.

        Returns:
            ``events`` (``seq``, ``text``, ``lines``, ``suppressed``, ``final``, ``at``),
            ``next_after`` (pass as ``after`` next time), ``state``, ``exit_code``.

        Raises:
            ProcessNotFound: No such watcher in this session.
        """
        record = await anyio.to_thread.run_sync(self._get_watcher, session_id, watcher_id)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            rows = await anyio.to_thread.run_sync(self._event_rows, watcher_id, after, limit)
            if rows or time.monotonic() >= deadline:
                break
            if not record.live:
                record = await anyio.to_thread.run_sync(self._get, session_id, watcher_id)
                if not record.live:
                    rows = await anyio.to_thread.run_sync(self._event_rows, watcher_id, after, limit)
                    break
            await anyio.sleep(_POLL_SECONDS)
        events = []
        for row in rows:
            note = self._notification(row)
            extra = note.data or {}
            events.append(
                {
                    "seq": note.seq,
                    "text": note.text,
                    "lines": extra.get("lines", []),
                    "suppressed": extra.get("suppressed", 0),
                    "final": bool(extra.get("final")),
                    "at": _iso(row["created_at"]),
                }
            )
        next_after = events[-1]["seq"] if events else after
        if events:
            with self._db() as conn:
                _records.ack_process(conn, watcher_id, "event", next_after)
        fresh = await anyio.to_thread.run_sync(self._get, session_id, watcher_id)
        return {
            "watcher_id": watcher_id,
            "events": events,
            "next_after": next_after,
            "state": fresh.state,
            "exit_code": fresh.exit_code,
        }

    def _describe(self, record: ProcessRecord) -> dict[str, Any]:
        log_bytes: int | None = None
        if not record.live and record.log_ref is not None:
            with contextlib.suppress(ToolError):
                info = self._archive.entry_info(record.log_ref)
                if info.get("finished") is not None:
                    log_bytes = int(str(info["total_bytes"]))
        if log_bytes is None:
            with contextlib.suppress(OSError):
                log_bytes = os.stat(record.log_path).st_size
        return {
            "process_id": record.process_id,
            "session_id": record.session_id,
            "command": record.command,
            "state": record.state,
            "kind": record.kind,
            "started": _iso(record.started_at),
            "ended": _iso(record.ended_at),
            "exit_code": record.exit_code,
            "exit_signal": record.exit_signal,
            "lifecycle": record.lifecycle,
            "completion_mode": record.completion_mode,
            "log_bytes": log_bytes,
            "log_ref": record.log_ref,
            "purpose": record.purpose,
        }

    def _ended(self, record: ProcessRecord) -> bool:
        """Cheap check (no SQL) that a live record's process has finished."""
        if record.kind == "promoted" and record.process_id in self._adopted:
            self._reap_adopted()
        if record.pid is None or record.pid_started is None:
            return record.state != "starting"
        return not is_same_process(record.pid, record.pid_started)

    async def read(
        self,
        session_id: str,
        process_id: str,
        offset: int = 0,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
    ) -> dict[str, Any]:
        """Read a process's output from ``offset``, waiting up to ``wait_ms`` for new output.

        A waiting read returns once new output has been quiet for `QUIET_SECONDS`, or there is
        ``max_bytes`` of it (at most 256 KiB), or the process ended, or the wait is over: never on the first byte
        of a burst. A read that shows the exit counts as the completion's delivery.

        Returns:
            ``output`` (cleaned, redacted), ``offset`` (where it starts), ``next_offset``,
            ``total_bytes``, ``eof`` (nothing more on disk now), ``exited``, ``exit_code``,
            ``state`` and, when the offset was compacted away, ``note``; after the exit of a
            verification command, ``verification``. All output has been read once ``exited``
            and ``eof`` are both true.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The offset is past the end of the log.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        limit = max_bytes or DEFAULT_READ_BYTES
        if wait_ms and record.live:
            record = await self._wait_output(record, offset, limit, time.monotonic() + wait_ms / 1000)
        elif record.live and self._ended(record):
            record = await anyio.to_thread.run_sync(self._await_end, record)
        data = await anyio.to_thread.run_sync(self._read_page, record, offset, limit)
        if not record.live:
            await anyio.to_thread.run_sync(self._seen_exit, record, data)
        return data

    async def _wait_output(
        self, record: ProcessRecord, offset: int, limit: int, deadline: float
    ) -> ProcessRecord:
        """Wait for output past ``offset`` to arrive and go quiet (see `read`); the record as
        it is afterwards."""
        session_id, process_id = record.session_id, record.process_id
        next_check = time.monotonic() + _LIVENESS_SECONDS
        last_size = offset
        grew_at: float | None = None
        while (now := time.monotonic()) < deadline:
            if now >= next_check:
                # A supervisor that died leaves no signal: look at it now and then.
                next_check = now + _LIVENESS_SECONDS
                if not self._supervisor_alive(record):
                    return await anyio.to_thread.run_sync(self._get, session_id, process_id)
            if self._ended(record):
                return await anyio.to_thread.run_sync(self._await_end, record)
            try:
                size = os.stat(record.log_path).st_size
            except OSError:
                size = 0
            if size > last_size:
                last_size, grew_at = size, now
                if size - offset >= min(limit, _PACED_BYTES):
                    break
            elif grew_at is not None and now - grew_at >= QUIET_SECONDS:
                break
            await anyio.sleep(_POLL_SECONDS)
        return await anyio.to_thread.run_sync(self._get, session_id, process_id)

    def _seen_exit(self, record: ProcessRecord, data: dict[str, Any]) -> None:
        """The session has seen this ended process's exit (a read or a wait showed it): its
        completion counts as delivered; a verification command's result
        carries its summary."""
        with self._db() as conn:
            _records.ack_process(conn, record.process_id, "completion")
        if record.log_ref is not None:
            # Not finished here: a reader may be paging through it (upkeep finishes it).
            with contextlib.suppress(ToolError):
                self._archive.pin(record.log_ref, False)
        verification = self._verification(record)
        if verification is not None:
            data["verification"] = verification

    def _verification(self, record: ProcessRecord) -> dict[str, Any] | None:
        """The verification of an ended verification command (a test, build, lint or type
        check), read from the end of its log once and kept in its record; its completion's
        line gets the summary. None for other commands."""
        if record.verification is not None:
            kept: dict[str, Any] | None = json.loads(record.verification)
            return kept
        classification = _classify(record.command) if record.kind != "watcher" else None
        result: dict[str, Any] | None = None
        if classification is not None and record.log_ref is not None:
            try:
                info = self._archive.entry_info(record.log_ref)
                total = (
                    int(str(info["total_bytes"] or 0))
                    if info.get("finished")
                    else os.stat(record.log_path).st_size
                )
                page = self._archive.read(
                    record.log_ref, max(0, total - _VERIFY_TAIL_BYTES), _VERIFY_TAIL_BYTES,
                    session_id=record.session_id,
                )  # fmt: skip
                text = clean_terminal_text(page.data)
            except (ToolError, OSError):
                text = ""
            from codemode.tools._verification import parse_verification

            verification = parse_verification(classification, text, record.exit_code)
            result = verification.to_dict()
            summary = _summary(verification)
            with self._db() as conn:
                if summary:
                    row = conn.execute(
                        "SELECT id, text FROM notifications WHERE process_id = ? AND kind = 'completion'",
                        (record.process_id,),
                    ).fetchone()
                    if row is not None and summary not in row["text"]:
                        marker = ". Read its output"
                        head, found, tail = row["text"].partition(marker)
                        text_with = (
                            f"{head} — {summary}{found}{tail}" if found else f"{row['text']} — {summary}"
                        )
                        conn.execute("UPDATE notifications SET text = ? WHERE id = ?", (text_with, row["id"]))
        with self._db() as conn:
            _records.update(conn, record.process_id, verification=json.dumps(result))
        return result

    async def wait(
        self,
        session_id: str,
        process_id: str,
        until: str | dict[str, str] = "exit",
        timeout_ms: int = DEFAULT_WAIT_MS,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Wait until a process exits, or a new line of its output (from ``offset``) matches
        ``until["pattern"]`` (a regular expression), or ``timeout_ms`` passes. For a watcher,
        its events are the lines (``offset`` is the event number to wait after).

        Returns:
            ``reason`` (``exit``, ``pattern`` or ``timeout``), ``line`` (the matching line),
            ``next_offset`` (where to go on from: after the matching line, else the end of what
            was looked at; a watcher's: the event number), ``exited``, ``exit_code``, ``state``,
            ``waited_ms``; after the exit of a verification command, ``verification``.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The pattern is not a valid regular expression.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        pattern = _compile(until["pattern"]) if isinstance(until, dict) else None
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        if record.kind == "watcher":
            data = await self._wait_events(record, pattern, offset, deadline)
        else:
            data = await self._wait_log(record, pattern, offset, deadline)
        data["waited_ms"] = int((time.monotonic() - started) * 1000)
        if isinstance(until, dict):
            data["pattern"] = until["pattern"]
        return data

    async def _wait_log(
        self, record: ProcessRecord, pattern: re.Pattern[str] | None, offset: int, deadline: float
    ) -> dict[str, Any]:
        position = offset
        next_check = time.monotonic() + _LIVENESS_SECONDS
        while True:
            ended = not record.live or self._ended(record)
            if ended and record.live:
                record = await anyio.to_thread.run_sync(self._await_end, record)
            if pattern is not None:
                found, position = await anyio.to_thread.run_sync(
                    self._match_log, record, pattern, position, not record.live
                )
                if found is not None:
                    line, line_end = found
                    return self._wait_result(record, "pattern", line, line_end)
            if not record.live:
                size = await anyio.to_thread.run_sync(self._log_size, record)
                result = self._wait_result(record, "exit", None, max(size, position))
                await anyio.to_thread.run_sync(self._seen_exit, record, result)
                return result
            now = time.monotonic()
            if now >= deadline:
                if pattern is None:
                    position = await anyio.to_thread.run_sync(self._log_size, record)
                return self._wait_result(record, "timeout", None, position)
            if now >= next_check:
                next_check = now + _LIVENESS_SECONDS
                if not self._supervisor_alive(record):
                    record = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
            await anyio.sleep(_POLL_SECONDS)

    def _log_size(self, record: ProcessRecord) -> int:
        try:
            return os.stat(record.log_path).st_size
        except OSError:
            return 0

    def _match_log(
        self, record: ProcessRecord, pattern: re.Pattern[str], position: int, ended: bool
    ) -> tuple[tuple[str, int] | None, int]:
        """The first complete line from ``position`` that matches (its text and the offset
        after it), and how far complete lines were looked at. Once ``ended``, a last line
        without its line end counts too."""
        if record.log_ref is None or self._log_size(record) <= position:
            return None, position
        page_bytes = 1 << 16
        while True:
            page = self._archive.read(record.log_ref, position, page_bytes, session_id=record.session_id)
            data, start = page.data, page.offset
            if not data:
                return None, start
            final = ended and page.next_offset >= page.total_bytes
            last_end = data.rfind(b"\n") + 1
            if final or (last_end == 0 and len(data) >= page_bytes):
                chunk = data  # the last line, or a line longer than a page: as it is
            elif last_end == 0:
                return None, start  # a line not yet complete
            else:
                chunk = data[:last_end]
            pieces = chunk.split(b"\n")
            if pieces[-1] == b"":
                pieces.pop()
            cursor = start
            for raw in pieces:
                line_end = min(cursor + len(raw) + 1, start + len(chunk))
                text = self._redactor.redact(clean_terminal_text(raw)).rstrip("\r")
                if text.strip() and pattern.search(text):
                    return (text, line_end), line_end
                cursor = line_end
            position = start + len(chunk)
            if position >= page.total_bytes or len(data) < page_bytes:
                return None, position

    def _wait_result(
        self, record: ProcessRecord, reason: str, line: str | None, next_offset: int
    ) -> dict[str, Any]:
        return {
            "process_id": record.process_id,
            "kind": record.kind,
            "reason": reason,
            "line": line,
            "next_offset": next_offset,
            "exited": not record.live,
            "exit_code": record.exit_code,
            "state": record.state,
        }

    async def _wait_events(
        self, record: ProcessRecord, pattern: re.Pattern[str] | None, after: int, deadline: float
    ) -> dict[str, Any]:
        cursor = after
        while True:
            rows = await anyio.to_thread.run_sync(
                self._event_rows, record.process_id, cursor, MAX_EVENTS_PER_READ
            )
            for row in rows:
                cursor = row["seq"]
                note = self._notification(row)
                lines = (note.data or {}).get("lines") or [note.text]
                final = bool((note.data or {}).get("final"))
                matched = next((ln for ln in lines if pattern is not None and pattern.search(ln)), None)
                if matched is not None or final:
                    fresh = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
                    with self._db() as conn:  # the model sees this event (the others stay pending)
                        _records.ack(conn, record.session_id, [row["id"]])
                    reason = "pattern" if matched is not None else "exit"
                    return self._wait_result(
                        fresh, reason, matched if matched is not None else note.text, cursor
                    )
            if time.monotonic() >= deadline:
                fresh = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
                return self._wait_result(fresh, "timeout", None, cursor)
            await anyio.sleep(_POLL_SECONDS)

    def _event_rows(self, process_id: str, after: int, limit: int) -> list[sqlite3.Row]:
        with self._db() as conn:
            return _records.events(conn, process_id, after, limit)

    def _await_end(self, record: ProcessRecord) -> ProcessRecord:
        deadline = time.monotonic() + _RECORD_END_WAIT_SECONDS
        while True:
            fresh = self._get(record.session_id, record.process_id)
            if not fresh.live or time.monotonic() > deadline:
                return fresh
            time.sleep(_POLL_SECONDS)

    def _read_page(self, record: ProcessRecord, offset: int, limit: int) -> dict[str, Any]:
        assert record.log_ref is not None
        page = self._archive.read(record.log_ref, offset, limit, session_id=record.session_id)
        # A background command wrote to its PTY; a promoted one to pipes.
        view = PTY_VIEW if record.kind == "background" else terminal_view(self._environ)
        output = self._redactor.redact(clean_terminal_text(page.data, view))
        data: dict[str, Any] = {
            "process_id": record.process_id,
            "output": output,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "total_bytes": page.total_bytes,
            "eof": page.eof,
            "exited": not record.live,
            "exit_code": record.exit_code,
            "state": record.state,
        }
        if page.dropped is not None:
            start, end = page.dropped
            why = (
                "older output was compacted away"
                if end <= page.retained_from
                else "the log outgrew its cap, which keeps its head and its tail"
            )
            data["note"] = (
                f"bytes {start}-{end} of the log are not kept ({why}); reading from the next kept byte, {end}"
            )
        return data

    async def write(self, session_id: str, process_id: str, text: str) -> dict[str, Any]:
        """Send ``text`` to a background process's stdin (its PTY).

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The process has exited or takes no input.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        return await anyio.to_thread.run_sync(self._write, record, text.encode())

    def _write(self, record: ProcessRecord, data: bytes) -> dict[str, Any]:
        pid = record.process_id
        if record.kind == "promoted":
            raise ToolError(
                f"process {pid} was started in the foreground with stdin closed, so it takes no input; "
                "start a command that reads input with run_in_background: true",
                {"error": "no_input", "process_id": pid},
            )
        exited = ToolError(
            f"process {pid} has ended ({record.state}, exit code "
            f"{'unknown' if record.exit_code is None else record.exit_code}); it takes no more input",
            {"error": "exited", "process_id": pid},
        )
        if not record.live or record.input_path is None or record.input_token is None:
            raise exited
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(10)
        try:
            try:
                sock.connect("\0" + record.input_path.removeprefix("@"))
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    raise exited from exc
                raise ToolError(f"cannot write to process {pid}: {exc.strerror}") from exc
            try:
                sock.sendall(record.input_token.encode() + data)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(2)  # the supervisor has handed every byte on
            except TimeoutError:
                raise ToolError(
                    f"process {pid} is not reading its input; some of the {len(data)} bytes may not "
                    "have been sent",
                    {"error": "input_blocked"},
                ) from None
            except OSError as exc:
                raise exited from exc
        finally:
            sock.close()
        return {"process_id": pid, "bytes": len(data)}

    async def stop(self, session_id: str, process_id: str) -> dict[str, Any]:
        """Stop a process and its whole tree (identity checked first).

        Returns:
            ``message``, ``process_id``, ``state``, ``exit_code``.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The recorded pid now belongs to another process (nothing is signalled).
        """
        with anyio.CancelScope(shield=True):
            record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
            result = await anyio.to_thread.run_sync(self._stop, record)
        return result

    def _stop(self, record: ProcessRecord, note: str = "") -> dict[str, Any]:
        pid = record.process_id
        if not record.live:
            # Anything it left behind that still carries its marker goes too.
            terminate_tree(record.marker, grace_seconds=TERM_GRACE_SECONDS, cgroup=record.cgroup)
            if record.cgroup:
                cgroup_remove(record.cgroup)
            return {
                "message": f"Process {pid} had already ended ({record.state}, exit code "
                f"{'unknown' if record.exit_code is None else record.exit_code}); nothing to stop.",
                "process_id": pid,
                "state": record.state,
                "exit_code": record.exit_code,
            }
        root = _live_root(record)
        if root is None and record.pid is not None and create_time(record.pid) is not None:
            with self._db() as conn:
                _records.update(conn, pid, stop_requested=1)
            raise ToolError(
                f"process {pid}: its pid {record.pid} now belongs to another process (the start time "
                "differs), so nothing was signalled; the original process has ended",
                {"error": "pid_reused", "process_id": pid},
            )
        with self._db() as conn:
            _records.update(conn, pid, stop_requested=1)
        terminate_tree(
            record.marker, pgid=root, root_pid=root, grace_seconds=TERM_GRACE_SECONDS, cgroup=record.cgroup
        )
        fresh = self._await_end(record)
        if fresh.live and not self._supervisor_alive(fresh):
            fresh = self._reconcile(fresh)
        elif fresh.live:
            with self._db() as conn:
                _records.record_end(conn, pid, exit_code=None, exit_signal=None, state="stopped", note=note)
                fresh = _records.get(conn, pid) or fresh
        code = "unknown" if fresh.exit_code is None else fresh.exit_code
        return {
            "message": f"Stopped process {pid} and every process it started (exit code {code}).",
            "process_id": pid,
            "state": fresh.state,
            "exit_code": fresh.exit_code,
        }

    def _update(self, session_id: str, process_id: str, completion_mode: str) -> dict[str, Any]:
        record = self._get(session_id, process_id)
        with self._db() as conn:
            _records.update(conn, process_id, completion_mode=completion_mode)
        when = "" if record.live else " (it has already ended, so this changes nothing)"
        return {
            "message": f"Process {process_id}: completion_mode is now {completion_mode}{when}.",
            "process_id": process_id,
            "completion_mode": completion_mode,
        }

    # ------------------------------------------------------------------ host entry points

    def output_bytes(self, session_id: str, call_id: str) -> int:
        """Bytes the session's foreground commands started by this call have output so far
        (for progress reports; commands handed to the background are no longer counted)."""
        with self._lock:
            runs = list(self._foreground)
        return sum(
            r.pump.bytes_read for r in runs if r.spec.session_id == session_id and r.spec.call_id == call_id
        )

    async def close_session(self, session_id: str) -> None:
        """Stop the session's ``lifecycle: session`` processes."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        with anyio.CancelScope(shield=True):
            for record in live:
                if record.lifecycle == "session":
                    with contextlib.suppress(ToolError):
                        await anyio.to_thread.run_sync(self._stop, record)
            await anyio.to_thread.run_sync(self._end_leftovers, session_id)

    def _end_leftovers(self, session_id: str | None) -> None:
        """End what finished foreground runs of one session (None: every session) left running."""
        with self._lock:
            if session_id is None:
                paths = set().union(*self._leftovers.values()) if self._leftovers else set()
                self._leftovers.clear()
            else:
                paths = self._leftovers.pop(session_id, set())
        for path in paths:
            cgroup_kill(path, grace_seconds=TERM_GRACE_SECONDS)
            cgroup_remove(path)

    async def aclose(self) -> None:
        """Host shutdown: stop foreground runs; background processes, watchers and promoted
        runs live on (their supervisors read them)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runs = list(self._foreground)
        for running in runs:
            running.pump.wake()
        self._reap_adopted()
        with anyio.CancelScope(shield=True):
            deadline = time.monotonic() + 10
            while self._foreground and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(self._end_leftovers, None)
            CGROUPS.clear(host_cgroup_owner(state_tag(self._archive)))
        with self._db() as conn:
            conn.close()


def _live_root(record: _records.ProcessRecord) -> int | None:
    """The record's root pid while it still names the same process (start time checked)."""
    if record.pid is None or record.pid_started is None:
        return None
    return record.pid if is_same_process(record.pid, record.pid_started) else None


def _list_text(rows: list[dict[str, Any]], redactor: Redactor) -> str:
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


def _read_text(data: dict[str, Any]) -> str:
    lines = [data["output"].rstrip("\n")] if data["output"].strip() else []
    if data.get("note"):
        lines.append(data["note"])
    more = data["next_offset"] < data["total_bytes"]
    if data["exited"]:
        code = "unknown" if data["exit_code"] is None else data["exit_code"]
        lines.append(f"[process {data['process_id']} {data['state']}, exit code {code}]")
        verification = data.get("verification")
        if verification and verification.get("summary_line"):
            lines.append(f"{verification['tool']}: {verification['summary_line']}")
    elif not lines:
        lines.append(f"[no new output; still running; next offset_bytes {data['next_offset']}]")
    if more:
        lines.append(f"[more output: read on with offset_bytes {data['next_offset']}]")
    return "\n".join(lines)
