"""Held sessions' resume secrets in the state database: issued, replaced, tied to a tenant,
usable only once the session ended; a version 10 database gains their table, and a version 12
one names its processes by their start since boot."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import psutil

from codemode.sandbox import identity_is_gone, process_identity, process_start
from codemode.state import SCHEMA_VERSION, State, process_records
from codemode.state import session_holds as holds


def _connect(tmp_path: Path) -> sqlite3.Connection:
    state = State(tmp_path / "state")
    state.close()
    return process_records.connect(state.db_path)


def test_a_secret_resumes_its_session_for_its_tenant_once_it_ended(tmp_path: Path) -> None:
    conn = _connect(tmp_path)
    try:
        holds.hold(conn, "mcp-a", "1x1.0")
        secret = holds.issue_resume(conn, "mcp-a", "alice")
        assert holds.resume_target(conn, secret, "alice") == ("mcp-a", True)  # held: not yet
        assert holds.resume_target(conn, secret, "bob") is None  # another tenant's
        holds.end(conn, "mcp-a", "1x1.0", "closed")
        assert holds.resume_target(conn, secret, "alice") == ("mcp-a", False)
        renewed = holds.issue_resume(conn, "mcp-a", "alice")
        assert holds.resume_target(conn, secret, "alice") is None  # replaced
        assert holds.resume_target(conn, renewed, "alice") == ("mcp-a", False)
        stored = {row[0] for row in conn.execute("SELECT secret_hash FROM session_resume")}
        assert renewed not in stored and len(stored) == 1  # only its hash is kept
        never = holds.issue_resume(conn, "mcp-never-held", "alice")
        assert holds.resume_target(conn, never, "alice") is None  # it never ran anything
        holds.expire(conn, before=float("inf"))  # its end is older than the keep window
        assert holds.resume_target(conn, renewed, "alice") is None
    finally:
        conn.close()


def test_a_version_10_state_db_gains_the_resume_table(tmp_path: Path) -> None:
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("DROP TABLE session_resume")
        conn.execute("PRAGMA user_version = 10")
    conn.close()
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert version == SCHEMA_VERSION and "session_resume" in tables


def test_a_version_12_state_db_names_processes_by_their_start_since_boot(tmp_path: Path) -> None:
    # Version 12 recorded psutil's wall-clock create_time(): after the upgrade the same live
    # processes (a command, its supervisor, a session's holder) are still recognised.
    state = tmp_path / "state"
    State(state).close()
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        me = os.getpid()
        command_started = psutil.Process(proc.pid).create_time()
        my_start = psutil.Process(me).create_time()
        with sqlite3.connect(state / "state.db") as conn:
            process_records.insert(
                conn,
                process_id="p_old", session_id="s", command="sleep 1000", cwd="/", kind="background",
                marker="m", lifecycle="detached", completion_mode="silent", state="running",
                pid=proc.pid, pid_started=command_started, supervisor_pid=me,
                supervisor_started=my_start, log_path="/nonexistent", started_at=0.0,
            )  # fmt: skip
            holds.hold(conn, "s", f"{me}x{round(my_start * 100)}")
            conn.execute("PRAGMA user_version = 12")
        conn.close()
        State(state).close()
        conn = process_records.connect(state / "state.db")
        try:
            record = process_records.get(conn, "p_old")
            held = holds.held(conn)
        finally:
            conn.close()
        assert record is not None
        assert record.pid_started == process_start(proc.pid)
        assert record.supervisor_started == process_start(me)
        assert held == [("s", process_identity(me))]
        assert not identity_is_gone(held[0][1])
    finally:
        proc.kill()
        proc.wait()


def test_every_front_lists_the_sessions_held_open_with_their_tenant_and_client(tmp_path: Path) -> None:
    conn = _connect(tmp_path)
    try:
        holds.hold(conn, "mcp-a", "1t1", "alice", "claude-code 2.1")
        holds.hold(conn, "mcp-b", "2t2")
        holds.hold(conn, "mcp-c", "2t2", "bob", None)
        holds.end(conn, "mcp-c", "2t2", "closed")
        listed = {(h.session_id, h.holder, h.tenant, h.client) for h in holds.open_holds(conn, 10)}
        assert listed == {("mcp-a", "1t1", "alice", "claude-code 2.1"), ("mcp-b", "2t2", None, None)}
        assert len(holds.open_holds(conn, 1)) == 1
    finally:
        conn.close()


def test_the_records_connection_commits_as_the_state_database_does(tmp_path: Path) -> None:
    # One durability for the one database: WAL with synchronous NORMAL (a commit outlives a
    # crash of any process). The records' connection used SQLite's default, FULL: a sync of
    # the log at every commit a front makes for each session it opens and closes.
    state = State(tmp_path / "state")
    try:
        with state.db.connection() as pooled:
            (expected,) = pooled.execute("PRAGMA synchronous").fetchone()
        conn = process_records.connect(state.db_path)
        try:
            (synchronous,) = conn.execute("PRAGMA synchronous").fetchone()
        finally:
            conn.close()
    finally:
        state.close()
    assert synchronous == expected == 1  # NORMAL
