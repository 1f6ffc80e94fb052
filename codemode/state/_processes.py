"""Durable records of background processes and their completion notifications (SQLite).

Standard library only: the background supervisor (``codemode/tools/bash/supervisor``) imports
it without the rest of the ``codemode`` package, to stay small and quick to start. The host has created (or migrated) the
schema before any supervisor starts.

Two tables of the state database (their schema is ``_schema``'s, with every other table's):

* ``bash_processes``: one row per background process, promoted run or Monitor watcher
  (``kind`` background, promoted, watcher). ``state`` is ``starting``, ``running``,
  ``exited``, ``stopped``, ``failed`` (never started) or ``lost`` (its supervisor ended
  without recording an exit; the exit code is unknown).
* ``notifications``: what a session is told: completions (one per process), keyword reports
  and watcher events (numbered per process). ``delivered_at`` is set when the session has
  seen one (the host delivered it, or a read or wait showed it); a delivered one is never
  returned again.

An end and the notification it causes (a completion, or a watcher's exit event) are written
in one transaction, guarded by the previous state, so whoever records an exit (supervisor,
host, or a reconciler after a crash) queues exactly one.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIVE_STATES = ("starting", "running")


def connect(db_path: str | Path) -> sqlite3.Connection:
    """Open the database for this module's use (autocommit; explicit transactions)."""
    conn = sqlite3.connect(str(db_path), timeout=30, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 30000")
    # As every other connection to the state database (`_database`): in WAL mode a commit then
    # outlives a crash of any process, not a power loss. SQLite's default (FULL) syncs the log
    # at each commit: ~250 us and ~100 us of CPU here, paid on this connection by a front for
    # every session it opens and closes (its hold, its resume secret), with the connection's
    # lock held meanwhile; 10 us so.
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@dataclass(frozen=True)
class ProcessRecord:
    """One row of ``bash_processes``."""

    process_id: str
    session_id: str
    command: str
    cwd: str
    kind: str
    marker: str
    lifecycle: str
    completion_mode: str
    purpose: str | None
    scope: str | None
    state: str
    pid: int | None
    pid_started: float | None
    supervisor_pid: int | None
    supervisor_started: float | None
    log_path: str
    log_ref: str | None
    log_base: int
    input_path: str | None
    input_token: str | None
    cgroup: str | None
    started_at: float
    ended_at: float | None
    exit_code: int | None
    exit_signal: str | None
    stop_requested: int
    error: str | None
    options: str | None
    verification: str | None

    @property
    def live(self) -> bool:
        """Whether the record says the process is (or is about to be) running."""
        return self.state in LIVE_STATES


def _record(row: sqlite3.Row | None) -> ProcessRecord | None:
    return None if row is None else ProcessRecord(**dict(row))


def insert(conn: sqlite3.Connection, **fields: Any) -> None:
    """Insert a new process record."""
    names = ", ".join(fields)
    marks = ", ".join("?" for _ in fields)
    conn.execute(f"INSERT INTO bash_processes ({names}) VALUES ({marks})", tuple(fields.values()))


def update(conn: sqlite3.Connection, process_id: str, **fields: Any) -> None:
    """Update fields of one process record."""
    sets = ", ".join(f"{name} = ?" for name in fields)
    conn.execute(f"UPDATE bash_processes SET {sets} WHERE process_id = ?", (*fields.values(), process_id))


def get(conn: sqlite3.Connection, process_id: str) -> ProcessRecord | None:
    """The record of one process, whatever its session."""
    return _record(
        conn.execute("SELECT * FROM bash_processes WHERE process_id = ?", (process_id,)).fetchone()
    )


def for_session(conn: sqlite3.Connection, session_id: str | None) -> list[ProcessRecord]:
    """Records of one session (or of all sessions), oldest first."""
    if session_id is None:
        rows = conn.execute("SELECT * FROM bash_processes ORDER BY started_at").fetchall()
    else:
        rows = conn.execute(
            "SELECT * FROM bash_processes WHERE session_id = ? ORDER BY started_at", (session_id,)
        ).fetchall()
    return [ProcessRecord(**dict(row)) for row in rows]


def live_records(conn: sqlite3.Connection, session_id: str | None = None) -> list[ProcessRecord]:
    """Records in a live state (of one session or all)."""
    marks = ", ".join("?" for _ in LIVE_STATES)
    if session_id is None:
        rows = conn.execute(f"SELECT * FROM bash_processes WHERE state IN ({marks})", LIVE_STATES).fetchall()
    else:
        rows = conn.execute(
            f"SELECT * FROM bash_processes WHERE session_id = ? AND state IN ({marks})",
            (session_id, *LIVE_STATES),
        ).fetchall()
    return [ProcessRecord(**dict(row)) for row in rows]


_REDACTOR: Any = None


def _redactor() -> Any:
    """The codemode redactor (``_redact.py`` beside this file: the standard library, hyperscan
    and re2), imported on first use (the supervisor imports it as the host does)."""
    global _REDACTOR
    if _REDACTOR is None:
        from codemode.state._redact import Redactor

        _REDACTOR = Redactor()
    return _REDACTOR


def short_command(command: str, limit: int = 80) -> str:
    """``command`` for a notification line: redacted whole, controls made visible, then cut to
    ``limit`` characters (`Redactor.one_line`)."""
    return str(_redactor().one_line(command, limit))


def completion_text(process_id: str, command: str, state: str, exit_code: int | None, note: str = "") -> str:
    """The one line a session gets when a background process ends."""
    what = f"Background process {process_id} (`{short_command(command)}`)"
    if state == "lost" or exit_code is None:
        line = f"{what} ended; its exit code is unknown"
    elif state == "stopped":
        line = f"{what} was stopped (exit code {exit_code})"
    else:
        line = f"{what} exited with code {exit_code}"
    return f'{line}{note}. Read its output with bash({{action: "read", process_id: "{process_id}"}}).'


def watcher_name(process_id: str, options: str | None) -> str:
    """``Monitor watcher ID ("description")`` for event lines."""
    description = (json.loads(options) if options else {}).get("description")
    label = f' ("{_redactor().one_line(description, 60)}")' if description else ""
    return f"Monitor watcher {process_id}{label}"


def watcher_end_text(
    process_id: str, options: str | None, state: str, exit_code: int | None, note: str
) -> str:
    """The event a watcher's own end makes."""
    what = watcher_name(process_id, options)
    if state == "lost" or exit_code is None:
        line = f"{what} ended; its exit code is unknown"
    elif state == "stopped":
        line = f"{what} was stopped (exit code {exit_code})"
    else:
        line = f"{what} exited with code {exit_code}"
    return f"{line}{note}."


def _insert_note(
    conn: sqlite3.Connection,
    row: sqlite3.Row,
    kind: str,
    seq: int,
    text: str,
    *,
    now: float,
    exit_code: int | None = None,
    data: Mapping[str, object] | None = None,
    delivered: bool = False,
) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO notifications (session_id, process_id, kind, seq, command, exit_code, text,"
        " data, created_at, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row["session_id"],
            row["process_id"],
            kind,
            seq,
            row["command"],
            exit_code,
            text,
            None if data is None else json.dumps(data),
            now,
            now if delivered else None,
        ),
    )


def _next_seq(conn: sqlite3.Connection, process_id: str, kind: str) -> int:
    (last,) = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM notifications WHERE process_id = ? AND kind = ?",
        (process_id, kind),
    ).fetchone()
    return int(last) + 1


def record_end(
    conn: sqlite3.Connection,
    process_id: str,
    *,
    exit_code: int | None,
    exit_signal: str | None,
    state: str | None = None,
    note: str = "",
    error: str | None = None,
    data: Mapping[str, object] | None = None,
) -> bool:
    """Record that a live process ended and queue its completion, in one transaction.

    A watcher's end is its last event (numbered after its others) instead of a completion;
    when a stop was requested (the stopper has the answer) it is queued as delivered.

    Args:
        conn: Connection from :func:`connect`.
        process_id: The process.
        exit_code: Its exit code (128+N when killed by signal N), or None when unknown.
        exit_signal: The signal name when killed by one.
        state: The end state; default ``stopped`` when a stop was requested, else ``exited``.
        note: Extra words for the notification line.
        error: Why the record ended this way (for ``lost``).
        data: Extra JSON data kept with the notification (e.g. the output's tail).

    Returns:
        False when the record was no longer live (someone else recorded the end first).
    """
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT * FROM bash_processes WHERE process_id = ?", (process_id,)).fetchone()
        if row is None or row["state"] not in LIVE_STATES:
            conn.execute("ROLLBACK")
            return False
        end_state = state or ("stopped" if row["stop_requested"] else "exited")
        conn.execute(
            "UPDATE bash_processes SET state = ?, exit_code = ?, exit_signal = ?, ended_at = ?, "
            "error = COALESCE(?, error), input_path = NULL, input_token = NULL WHERE process_id = ?",
            (end_state, exit_code, exit_signal, now, error, process_id),
        )
        if row["kind"] == "watcher":
            text = watcher_end_text(process_id, row["options"], end_state, exit_code, note)
            extra = {"final": True, "state": end_state, "exit_code": exit_code, **(data or {})}
            seq = _next_seq(conn, process_id, "event")
            _insert_note(
                conn, row, "event", seq, text, now=now, exit_code=exit_code, data=extra,
                delivered=bool(row["stop_requested"]),
            )  # fmt: skip
        elif row["completion_mode"] == "resume" and not row["stop_requested"]:
            text = completion_text(process_id, row["command"], end_state, exit_code, note)
            _insert_note(conn, row, "completion", 0, text, now=now, exit_code=exit_code, data=data)
        conn.execute("COMMIT")
        return True
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def add_note(
    conn: sqlite3.Connection, process_id: str, kind: str, text: str, data: Mapping[str, object] | None = None
) -> int | None:
    """Queue a watcher's event or a keyword report of a live process (numbered after its
    others of that kind); returns its number, or None when the process has no live record."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT * FROM bash_processes WHERE process_id = ?", (process_id,)).fetchone()
        if row is None or row["state"] not in LIVE_STATES:
            conn.execute("ROLLBACK")
            return None
        seq = _next_seq(conn, process_id, kind)
        _insert_note(conn, row, kind, seq, text, now=now, data=data)
        conn.execute("COMMIT")
        return seq
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def pending(conn: sqlite3.Connection, session_id: str) -> list[sqlite3.Row]:
    """Undelivered notifications of a session, oldest first."""
    return conn.execute(
        "SELECT * FROM notifications WHERE session_id = ? AND delivered_at IS NULL ORDER BY id",
        (session_id,),
    ).fetchall()


def changes(conn: sqlite3.Connection) -> int:
    """How many writes the process and notification tables have had (any connection's; kept by
    triggers): while it stands, nothing of theirs changed."""
    (count,) = conn.execute("SELECT n FROM bash_changes WHERE id = 0").fetchone()
    return int(count)


def undelivered(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Undelivered notifications of every session, oldest first."""
    return conn.execute("SELECT * FROM notifications WHERE delivered_at IS NULL ORDER BY id").fetchall()


def changed_since(conn: sqlite3.Connection, since: float) -> list[ProcessRecord]:
    """Records of processes that started or ended at ``since`` or later."""
    rows = conn.execute(
        "SELECT * FROM bash_processes WHERE started_at >= ? OR ended_at >= ?", (since, since)
    ).fetchall()
    return [record for record in map(_record, rows) if record is not None]


def since(conn: sqlite3.Connection, after: int, limit: int) -> list[sqlite3.Row]:
    """Notifications of every session with an id above ``after`` (below 0: the newest
    ``limit``), delivered or not, oldest first, at most ``limit`` (a console's feed: it
    acknowledges nothing)."""
    if after < 0:
        return conn.execute(
            "SELECT * FROM (SELECT * FROM notifications ORDER BY id DESC LIMIT ?) ORDER BY id", (limit,)
        ).fetchall()
    return conn.execute(
        "SELECT * FROM notifications WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
    ).fetchall()


def ack(conn: sqlite3.Connection, session_id: str, ids: list[int]) -> int:
    """Mark notifications of a session delivered; returns how many changed (a notification
    another channel delivered first does not count: claim one by acking it)."""
    if not ids:
        return 0
    marks = ", ".join("?" for _ in ids)
    cur = conn.execute(
        f"UPDATE notifications SET delivered_at = ? WHERE session_id = ? AND delivered_at IS NULL "
        f"AND id IN ({marks})",
        (time.time(), session_id, *ids),
    )
    return cur.rowcount


def ack_process(conn: sqlite3.Connection, process_id: str, kind: str, up_to: int | None = None) -> int:
    """Mark a process's notifications of one kind delivered (numbers up to ``up_to``): the
    session saw them through a read, a wait or a watcher's events."""
    cur = conn.execute(
        "UPDATE notifications SET delivered_at = ? WHERE process_id = ? AND kind = ? AND delivered_at IS NULL"
        " AND seq <= ?",
        (time.time(), process_id, kind, up_to if up_to is not None else 1 << 62),
    )
    return cur.rowcount


def events(conn: sqlite3.Connection, process_id: str, after: int, limit: int) -> list[sqlite3.Row]:
    """A watcher's events numbered above ``after``, oldest first."""
    return conn.execute(
        "SELECT * FROM notifications WHERE process_id = ? AND kind = 'event' AND seq > ? ORDER BY seq LIMIT ?",
        (process_id, after, limit),
    ).fetchall()
