"""Starting: a background process under its own supervisor (within the session's cap), and a
foreground run tracked while it runs and promoted (handed to a supervisor) once it outlasts
the hand-off."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from codemode._trace import current
from codemode.errors import ErrorCode, ToolError
from codemode.sandbox import SandboxPolicy, process_start
from codemode.state import Archive, ProcessRecord, Redactor
from codemode.state import process_records as _records
from codemode.tools.bash._answers import StartedAnswer
from codemode.tools.bash._background import adopt, start_background
from codemode.tools.bash._foreground import RunSpec, process_attributes

if TYPE_CHECKING:
    from codemode.tools.bash._foreground import Running


class Starting:
    """The :class:`ProcessManager`'s starts and hand-offs (a mixin: the manager holds the state)."""

    _adopted: dict[str, Running]
    _archive: Archive
    _closed: bool
    _foreground: set[Running]
    _leftovers: dict[str, set[str]]
    _lock: threading.Lock
    _max_background: int
    _max_watchers: int
    _network_refusals: dict[str, tuple[list[str], SandboxPolicy]]
    _redactor: Redactor
    _start_lock: threading.Lock

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        @property
        def _me(self) -> tuple[int, float | None]: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...

    def _network_note(self, process_id: str) -> str | None:
        """What the host's proxy refused a background process this host started, and how to
        allow it (`network_refusal_note`); None when it refused nothing."""
        kept = self._network_refusals.get(process_id)
        if kept is None:
            return None
        from codemode.sandbox import network_refusal_note  # loads with the first command's note

        return network_refusal_note(*kept)

    def _check_cap(self, session_id: str, kind: str = "background") -> bool:
        """Whether the session may start one more background process (or watcher: ``kind``)."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        watchers = kind == "watcher"
        count = sum(1 for r in live if (r.kind == "watcher") == watchers and self._reconcile(r).live)
        return count < (self._max_watchers if watchers else self._max_background)

    def _start_background(self, spec: RunSpec, settings: Mapping[str, object] | None = None) -> StartedAnswer:
        """Start a background process (in a worker thread). Traced, the start is a span
        (``codemode.bash``, as a foreground run's) naming the process it started."""
        trace = current()
        if trace is None:
            return self._start_untraced(spec, settings)
        with trace.span("codemode.bash", process_attributes(spec, self._redactor)) as span:
            started = self._start_untraced(spec, settings)
            span.set_attributes({"process.pid": started["pid"], "codemode.process.id": started["process_id"]})
        return started

    def _start_untraced(self, spec: RunSpec, settings: Mapping[str, object] | None) -> StartedAnswer:
        process_id = f"p_{secrets.token_hex(6)}"
        with self._start_lock:  # the cap check and the start are one step
            if not self._check_cap(spec.session_id):
                raise ToolError(
                    f"this session already has {self._max_background} background processes running (the "
                    'cap); stop one with bash({action: "stop", process_id}) or wait for one to finish',
                    {"cap": self._max_background},
                    code=ErrorCode.BACKGROUND_CAP,
                )
            answer = start_background(
                spec, process_id=process_id, archive=self._archive, db=self._db, settings=settings
            )
            refusals = answer.get("network_refusals")
            if refusals is not None:  # (each list holds at most 100 lines; the newest 1,024 kept)
                self._network_refusals[process_id] = (refusals, spec.policy)
                while len(self._network_refusals) > 1024:
                    del self._network_refusals[next(iter(self._network_refusals))]
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
        started = process_start(running.proc.pid)
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
