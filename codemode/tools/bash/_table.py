"""The process table: the records of background processes, watchers and promoted runs in the
state database, each reconciled with its supervisor (a supervisor that is gone leaves its record
lost) when it is looked at."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from codemode.errors import ErrorCode, ProcessNotFound, ToolError
from codemode.state import Archive, ProcessRecord
from codemode.state import process_records as _records
from codemode.tools.bash._answers import ProcessRow
from codemode.tools.bash._foreground import (
    TERM_GRACE_SECONDS,
)
from codemode.tools.bash._proctree import is_same_process, own_start, terminate_tree

if TYPE_CHECKING:
    from codemode.tools.bash._foreground import Running


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _not_found(process_id: str, what: str = "process") -> ToolError:
    if what == "watcher":
        return ToolError(
            f"no such watcher {process_id!r} in this session; monitor_list() shows this session's watchers",
            {"process_id": process_id},
            code=ErrorCode.NO_SUCH_WATCHER,
        )
    return ProcessNotFound(
        f"no such process {process_id!r} in this session; "
        'bash({action: "list"}) shows this session\'s processes',
        {"process_id": process_id},
    )


def _live_root(record: _records.ProcessRecord) -> int | None:
    """The record's root pid while it still names the same process (start time checked)."""
    if record.pid is None or record.pid_started is None:
        return None
    return record.pid if is_same_process(record.pid, record.pid_started) else None


class ProcessTable:
    """The :class:`ProcessManager`'s records (a mixin: the manager holds the state)."""

    _adopted: dict[str, Running]
    _archive: Archive
    _conn: sqlite3.Connection
    _db_lock: threading.RLock

    if TYPE_CHECKING:

        def _reap_adopted(self) -> None: ...
        def _elsewhere_error(self, session_id: str, process_id: str) -> ToolError | None: ...

    @property
    def _me(self) -> tuple[int, float | None]:
        """This host as a supervisor record names it: pid and start time (read at first use)."""
        return os.getpid(), own_start()

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._db_lock:
            yield self._conn

    def _get(self, session_id: str, process_id: str) -> ProcessRecord:
        with self._db() as conn:
            record = _records.get(conn, process_id)
        if record is None or record.session_id != session_id:
            # A process this front does not run may run on another machine (shared database).
            there = self._elsewhere_error(session_id, process_id) if record is None else None
            raise there or _not_found(process_id)
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

    def owner_of(self, process_id: str) -> str | None:
        """The session that owns ``process_id`` (for the CLI, where the person acts as owner)."""
        with self._db() as conn:
            record = _records.get(conn, process_id)
        return None if record is None else record.session_id

    def process_row(self, session_id: str, process_id: str) -> ProcessRow:
        """One process of a session, as `list_processes` describes it (blocking).

        Raises:
            ProcessNotFound: No such process in this session.
        """
        return self._describe(self._reconcile(self._get(session_id, process_id)))

    def log_file(self, session_id: str, process_id: str) -> str:
        """Where a process's log is written (in the state directory, which no command can
        write): a reader may watch its size to know when to read (blocking).

        Raises:
            ProcessNotFound: No such process in this session.
        """
        return self._get(session_id, process_id).log_path

    def list_processes(self, session_id: str | None, *, watchers: bool = False) -> list[ProcessRow]:
        """The processes of one session (or, for the CLI, of all sessions), oldest first;
        Monitor watchers only with ``watchers``."""
        with self._db() as conn:
            records = _records.for_session(conn, session_id)
        return [self._describe(self._reconcile(r)) for r in records if watchers or r.kind != "watcher"]

    def _describe(self, record: ProcessRecord) -> ProcessRow:
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
