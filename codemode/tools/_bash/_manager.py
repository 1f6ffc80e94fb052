"""The process manager: the ``bash`` tool's handler and the host's and CLI's entry points.

Background processes (``run_in_background``) run in a PTY owned by their own supervisor
process (``_supervisor.py``), which outlives the host, writes the raw log into the archive's
blob file and records the exit and the completion notification in SQLite.

A promoted run (a foreground run handed off after ``handoff_seconds``) stays the same piped
process and keeps depending on this host: a host thread keeps reading its pipes into its log
and records its exit. Making it independent of the host would mean starting every foreground
command under a supervisor, which would cost the light path most of its speed. When the host
shuts down (:meth:`ProcessManager.aclose`) promoted runs are stopped; if the host dies, the
next manager marks them ``lost`` (exit code unknown) and queues their completion.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from codemode.archive import Archive, ProcessRecord, Redactor
from codemode.archive import process_records as _records
from codemode.errors import ErrorCode, ProcessNotFound, ToolError, UserError
from codemode.sandbox import SandboxPolicy, cgroup_kill, cgroup_remove, check_policy
from codemode.tools._bash._background import PTY_VIEW, start_background
from codemode.tools._bash._env import resolve_cwd
from codemode.tools._bash._foreground import (
    CGROUPS,
    TERM_GRACE_SECONDS,
    Running,
    RunSpec,
    orphaned_foreground_cgroups,
    orphaned_foreground_markers,
    run_foreground,
)
from codemode.tools._bash._proctree import create_time, is_same_process, terminate_tree
from codemode.tools._bash._tool import (
    DEFAULT_READ_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    BashArgs,
    BashListArgs,
    BashReadArgs,
    BashRunArgs,
    BashStopArgs,
    BashUpdateArgs,
    BashWriteArgs,
    bash_tool,
    guidance,
)
from codemode.tools._model import Extension, TextContent, ToolContext, ToolResult
from codemode.tools._terminal import clean_terminal_text, terminal_view

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


@dataclass(frozen=True)
class Notification:
    """A background process's completion, queued for its session until acknowledged.

    Attributes:
        id: Pass to :meth:`ProcessManager.ack`.
        process_id: The process that ended.
        command: Its command line.
        exit_code: Its exit code; None when it cannot be known.
        text: One line for the model.
    """

    id: int
    process_id: str
    command: str
    exit_code: int | None
    text: str


@dataclass(eq=False)
class _Promoted:
    running: Running
    process_id: str
    thread: threading.Thread | None = None
    shutdown: bool = False


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _not_found(process_id: str) -> ProcessNotFound:
    return ProcessNotFound(
        f'no such process {process_id!r} in this session; bash({{action: "list"}}) shows this session\'s '
        "processes",
        {"error": "no_such_process", "process_id": process_id},
    )


class ProcessManager:
    """Runs commands for the ``bash`` tool and owns the records of background processes.

    Args:
        archive: The host's archive (logs, SQLite records).
        handoff_seconds: A foreground run still going after ``min(handoff_seconds, timeout)``
            moves to the background; None switches hand-off off (runs wait to their timeout).
        max_background_per_session: Cap on live background processes per session.
        redactor: Redacts text before it is returned (default: the archive's redactor).
        environ: The environment commands start from (default ``os.environ``).

    Raises:
        StateDirError: The records cannot be opened (from the archive).
    """

    def __init__(
        self,
        archive: Archive,
        *,
        handoff_seconds: float | None = 10.0,
        max_background_per_session: int = 32,
        redactor: Redactor | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._archive = archive
        self._handoff = handoff_seconds
        self._max_background = max_background_per_session
        self._redactor = redactor if redactor is not None else archive.redactor
        self._environ = dict(environ if environ is not None else os.environ)
        self._foreground: set[Running] = set()
        self._promoted: dict[str, _Promoted] = {}
        # Cgroups of finished foreground runs that left processes running, per session.
        self._leftovers: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._db_lock = threading.RLock()
        self._conn = _records.connect(archive.db_path)
        me = os.getpid()
        self._me = (me, create_time(me))
        self._closed = False
        self.maintain()

    # ------------------------------------------------------------------ plumbing

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._db_lock:
            yield self._conn

    def _get(self, session_id: str, process_id: str) -> ProcessRecord:
        with self._db() as conn:
            record = _records.get(conn, process_id)
        if record is None or record.session_id != session_id:
            raise _not_found(process_id)
        return self._reconcile(record)

    def _supervisor_alive(self, record: ProcessRecord) -> bool:
        if record.kind == "promoted":
            if record.process_id in self._promoted:
                return True
            if (record.supervisor_pid, record.supervisor_started) == self._me:
                return False  # ours, but no longer tracked: this host lost it
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
                note = (
                    "; the host that read its output ended"
                    if record.kind == "promoted"
                    else "; its supervisor ended without recording an exit"
                )
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
        # Foreground commands of a host that died (SIGKILL) have no reader left: end them.
        for marker in orphaned_foreground_markers():
            terminate_tree(marker, grace_seconds=TERM_GRACE_SECONDS)
            counts["orphans"] += 1
        for cgroup in orphaned_foreground_cgroups():
            counts["orphans"] += bool(cgroup_kill(cgroup))
            cgroup_remove(cgroup)
        with self._db() as conn:
            live = _records.live_records(conn)
        for record in live:
            if self._reconcile(record).state == "lost":
                counts["lost"] += 1
        cutoff = time.time() - _EXPIRE_SECONDS
        with self._db() as conn:
            pending_ids = {
                row["process_id"]
                for row in conn.execute(
                    "SELECT process_id FROM bash_notifications WHERE delivered_at IS NULL"
                )
            }
            records = _records.for_session(conn, None)
        for record in records:
            if record.live or record.log_ref is None:
                continue
            if record.kind == "background" and not self._log_finished(record.log_ref):
                with contextlib.suppress(ToolError):
                    self._archive.finish_log(record.log_ref)
            with contextlib.suppress(ToolError):
                self._archive.pin(record.log_ref, record.process_id in pending_ids)
            if (record.ended_at or record.started_at) < cutoff and record.process_id not in pending_ids:
                with self._db() as conn:
                    conn.execute("DELETE FROM bash_processes WHERE process_id = ?", (record.process_id,))
                    conn.execute(
                        "DELETE FROM bash_notifications WHERE process_id = ? AND delivered_at IS NOT NULL",
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
        return Extension(
            name="bash", tools=[bash_tool(self._handle, self._handoff)], guidance=guidance(self._handoff)
        )

    async def _handle(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
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
                data = await self.write(session, pid, text)
                return ToolResult.from_text(f"Wrote {data['bytes']} bytes to {pid}.", data)
            case BashStopArgs(process_id=pid):
                data = await self.stop(session, pid)
                return ToolResult.from_text(data["message"], data)
            case BashUpdateArgs(process_id=pid, completion_mode=mode):
                data = await anyio.to_thread.run_sync(self._update, session, pid, mode)
                return ToolResult.from_text(data["message"], data)
        raise AssertionError(f"unhandled bash arguments {type(args.root).__name__}")  # pragma: no cover

    def _spec(self, args: BashRunArgs, ctx: ToolContext) -> RunSpec:
        if "\x00" in args.command:
            raise ToolError(
                "the command contains a NUL character, which no shell command line can hold; remove it "
                "(use printf '\\0' to produce one)",
                {"error": "bad_command"},
            )
        policy = _with_capabilities(ctx, args)
        return RunSpec(
            command=args.command,
            cwd=resolve_cwd(args.cwd, ctx.workspace, policy),
            timeout_seconds=args.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
            session_id=ctx.session_id,
            policy=policy,
            purpose=args.purpose,
            scope=args.scope,
            lifecycle=args.lifecycle or "session",
            completion_mode=args.completion_mode or "resume",
            environ=self._environ,
            call_id=ctx.call_id,
        )

    async def _run(self, args: BashRunArgs, ctx: ToolContext) -> ToolResult:
        spec = self._spec(args, ctx)
        if args.run_in_background:
            # Shielded: once started, the process runs whatever happens to this call, so the
            # call finishes and says which process it started (also when its program ended
            # without awaiting it: the host then reports what it did, not "cancelled").
            with anyio.CancelScope(shield=True):
                data = await anyio.to_thread.run_sync(self._start_background, spec)
            pid = data["process_id"]
            text = (
                f"Started in the background as process {pid}. Read its output with "
                f'bash({{action: "read", process_id: "{pid}", wait_ms: 5000}}); stop it with '
                f'bash({{action: "stop", process_id: "{pid}"}}).'
            )
            if args.timeout_seconds is not None:
                text += " (timeout_seconds does not apply to background processes: stop it when done.)"
            return ToolResult.from_text(text, data)
        outcome = await run_foreground(
            spec,
            archive=self._archive,
            redactor=self._redactor,
            handoff_seconds=self._handoff,
            promote=self._promote,
            track=self._track,
        )
        # One content block per part, so that a budget cut keeps each stream's head and tail.
        content = [TextContent(text=block) for block in outcome.blocks]
        return ToolResult(content=content, structured_content=outcome.structured, is_error=outcome.is_error)

    # ------------------------------------------------------------------ starting

    def _check_cap(self, session_id: str) -> bool:
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        return sum(1 for r in live if self._reconcile(r).live) < self._max_background

    def _start_background(self, spec: RunSpec) -> dict[str, Any]:
        process_id = f"p_{secrets.token_hex(6)}"
        with self._start_lock:  # the cap check and the start are one step
            if not self._check_cap(spec.session_id):
                raise ToolError(
                    f"this session already has {self._max_background} background processes running (the "
                    'cap); stop one with bash({action: "stop", process_id}) or wait for one to finish',
                    {"error": "background_cap", "cap": self._max_background},
                )
            answer = start_background(spec, process_id=process_id, archive=self._archive, db=self._db)
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
        """Register a still-running foreground command as a background process (worker thread)."""
        spec = running.spec
        if self._closed or not self._check_cap(spec.session_id):
            return None
        process_id = f"p_{secrets.token_hex(6)}"
        started = create_time(running.proc.pid)
        log = running.log.stream()  # readable while it grows
        promoted = _Promoted(running, process_id)
        promoted.thread = threading.Thread(
            target=self._pump_promoted, args=(promoted,), name=f"codemode-bash-{process_id}", daemon=True
        )
        # Tracked before the record exists, so no reconcile can take it for a lost one.
        with self._lock:
            self._promoted[process_id] = promoted
        try:
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
                    log_path=str(log.path),
                    log_ref=log.ref,
                    input_path=None,
                    started_at=running.started_wall,
                    **spec.record_fields(),
                )
        except BaseException:
            with self._lock:
                self._promoted.pop(process_id, None)
            raise
        promoted.thread.start()
        return process_id

    def _pump_promoted(self, promoted: _Promoted) -> None:
        running = promoted.running
        try:
            running.pump.run(None)
        finally:
            exit_code, signal_name = running.reap()
            running.pump.close()
            running.log.close()
            with self._db() as conn:
                _records.record_end(
                    conn,
                    promoted.process_id,
                    exit_code=exit_code,
                    exit_signal=signal_name,
                    state="stopped" if promoted.shutdown else None,
                    note="; the host shut down, and a run handed off from the foreground ends with it"
                    if promoted.shutdown
                    else "",
                )
            with self._lock:
                self._promoted.pop(promoted.process_id, None)
                if not running.release_cgroup():
                    self._leftovers.setdefault(running.spec.session_id, set()).add(running.proc.cgroup or "")

    # ------------------------------------------------------------------ control actions

    def owner_of(self, process_id: str) -> str | None:
        """The session that owns ``process_id`` (for the CLI, where the person acts as owner)."""
        with self._db() as conn:
            record = _records.get(conn, process_id)
        return None if record is None else record.session_id

    def list_processes(self, session_id: str | None) -> list[dict[str, Any]]:
        """The processes of one session (or, for the CLI, of all sessions), oldest first."""
        with self._db() as conn:
            records = _records.for_session(conn, session_id)
        return [self._describe(self._reconcile(r)) for r in records]

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
        if record.kind == "promoted":
            promoted = self._promoted.get(record.process_id)
            return promoted is None or promoted.running.pump.finished
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

        Returns:
            ``output`` (cleaned, redacted), ``offset`` (where it starts), ``next_offset``,
            ``total_bytes``, ``eof`` (nothing more on disk now), ``exited``, ``exit_code``,
            ``state`` and, when the offset was compacted away, ``note``. All output has been
            read once ``exited`` and ``eof`` are both true.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The offset is past the end of the log.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        limit = max_bytes or DEFAULT_READ_BYTES
        if wait_ms and record.live:
            deadline = time.monotonic() + wait_ms / 1000
            next_check = time.monotonic() + _LIVENESS_SECONDS
            while time.monotonic() < deadline:
                if time.monotonic() >= next_check:
                    # A supervisor that died leaves no signal: look at it now and then.
                    next_check = time.monotonic() + _LIVENESS_SECONDS
                    if not self._supervisor_alive(record):
                        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
                        break
                if self._ended(record):
                    record = await anyio.to_thread.run_sync(self._await_end, record)
                    break
                try:
                    size = os.stat(record.log_path).st_size
                except OSError:
                    size = 0
                if size > offset:
                    break
                await anyio.sleep(_POLL_SECONDS)
            else:
                record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        elif record.live and self._ended(record):
            record = await anyio.to_thread.run_sync(self._await_end, record)
        return await anyio.to_thread.run_sync(self._read_page, record, offset, limit)

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

    def pending_notifications(self, session_id: str) -> list[Notification]:
        """Completions queued for a session and not yet acknowledged, oldest first."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        for record in live:
            self._reconcile(record)
        with self._db() as conn:
            rows = _records.pending(conn, session_id)
        return [Notification(r["id"], r["process_id"], r["command"], r["exit_code"], r["text"]) for r in rows]

    def ack(self, session_id: str, ids: list[int]) -> None:
        """Mark notifications delivered; they are never returned again (also after a restart)."""
        with self._db() as conn:
            _records.ack(conn, session_id, ids)
            rows = (
                conn.execute(
                    f"SELECT p.log_ref FROM bash_processes p JOIN bash_notifications n USING (process_id) "
                    f"WHERE n.id IN ({', '.join('?' for _ in ids)})",
                    tuple(ids),
                ).fetchall()
                if ids
                else []
            )
        for row in rows:
            if row["log_ref"]:
                with contextlib.suppress(ToolError):
                    self._archive.pin(row["log_ref"], False)

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
        """Host shutdown: stop foreground and promoted runs; background processes live on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runs = list(self._foreground)
            promoted = list(self._promoted.values())
        for running in runs:
            running.pump.wake()
        with anyio.CancelScope(shield=True):
            for item in promoted:
                item.shutdown = True
                await anyio.to_thread.run_sync(item.running.terminate)
                if item.thread is not None:
                    await anyio.to_thread.run_sync(item.thread.join, 10)
            deadline = time.monotonic() + 10
            while self._foreground and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(self._end_leftovers, None)
            CGROUPS.clear()
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
    elif not lines:
        lines.append(f"[no new output; still running; next offset_bytes {data['next_offset']}]")
    if more:
        lines.append(f"[more output: read on with offset_bytes {data['next_offset']}]")
    return "\n".join(lines)
