"""Learned result types of upstream MCP tools: the table, and migration 7 -> 8 that adds it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from codemode.state import SCHEMA_VERSION, State
from tests.state.conftest import MakeState


def test_learned_types_are_kept_per_server_and_tool(make_state: MakeState) -> None:
    first = make_state()
    first.learned.put("github", "search", {"type": "object"})
    first.learned.put("github", "search", {"type": "array"})  # a newer observation replaces it
    first.learned.put("docs", "search", {"type": "string"})
    first.close()
    again = make_state("another" if first.is_shared else "state")  # another machine, or a restart
    assert again.learned.for_server("github") == {"search": {"type": "array"}}
    assert again.learned.for_server("docs") == {"search": {"type": "string"}}
    assert again.learned.for_server("other") == {}


def test_a_version_7_state_db_gets_the_learned_types_table(tmp_path: Path) -> None:
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("DROP TABLE upstream_result_types")
        conn.execute("INSERT INTO sessions (session_id, first_seen) VALUES ('kept', 1.0)")
        conn.execute("PRAGMA user_version = 7")
    conn.close()
    with State(state) as opened:
        with opened.db.connection() as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            sessions = conn.execute("SELECT session_id FROM sessions").fetchall()
        opened.learned.put("s", "t", {"type": "null"})
        assert opened.learned.for_server("s") == {"t": {"type": "null"}}
    assert version == SCHEMA_VERSION and sessions == [("kept",)]
