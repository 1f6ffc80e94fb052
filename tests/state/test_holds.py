"""Held sessions' resume secrets in the state database: issued, replaced, tied to a tenant,
usable only once the session ended; and a version 10 database gains their table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
        holds.end(conn, "mcp-a", "closed")
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
