"""The state's run journal: programs as every front's console shows them, written by one front
and read by another (two `State`s on one directory, as two server processes; or on two
directories sharing a PostgreSQL database, as two machines), bounded per session, by age and by
size; and a version 13 database gains it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from codemode.state import SCHEMA_VERSION, JournalEntry, State
from codemode.state import _journal as journal_module
from tests.state.conftest import MakeState


def _entry(
    session: str, run: str, started: float, status: str = "ok", source: str = "print(1)"
) -> JournalEntry:
    summary = {"session_id": session, "run_id": run, "status": status, "started": started}
    return JournalEntry(session, run, "alice", started, status, summary, {**summary, "source": source})


def test_what_one_front_writes_another_reads_in_order(make_state: MakeState) -> None:
    writer = make_state()
    reader = make_state("other") if writer.is_shared else make_state()
    try:
        assert reader.journal.last_seq() == 0
        writer.journal.write("1t1", [_entry("s", "r1", 10.0, "running"), _entry("s", "r2", 20.0)])
        changes = reader.journal.changes(0)
        assert [(c.run_id, c.holder, c.tenant, c.summary["status"]) for c in changes] == [
            ("r1", "1t1", "alice", "running"),
            ("r2", "1t1", "alice", "ok"),
        ]
        cursor = changes[-1].seq
        writer.journal.write("1t1", [_entry("s", "r1", 10.0, "error", source="throw 1")])  # r1 ended
        (again,) = reader.journal.changes(cursor)
        assert again.run_id == "r1" and again.seq > cursor and again.summary["status"] == "error"
        assert [run["run_id"] for run in reader.journal.summaries("s")] == ["r2", "r1"]  # newest first
        assert reader.journal.detail("s", "r1") == {
            "session_id": "s",
            "run_id": "r1",
            "status": "error",
            "started": 10.0,
            "source": "throw 1",
        }
        assert reader.journal.detail("s", "nope") is None
        assert reader.journal.counts(["s", "other"]) == {"s": (2, 20.0)}
    finally:
        writer.close()
        reader.close()


def test_a_session_keeps_its_newest_runs(make_state: MakeState) -> None:
    state = make_state()
    try:
        kept = journal_module.RUNS_KEPT
        state.journal.write("1t1", [_entry("s", f"r{i}", float(i)) for i in range(kept + 5)])
        state.journal.write("1t1", [_entry("t", "only", 1.0)])
        runs = state.journal.summaries("s", limit=kept + 10)
        assert len(runs) == kept and runs[-1]["run_id"] == "r5"  # the five oldest went
        assert state.journal.counts(["t"]) == {"t": (1, 1.0)}  # another session's are its own
    finally:
        state.close()


def test_trimming_drops_old_runs_then_the_oldest_past_the_size_bound(
    make_state: MakeState, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = make_state()
    try:
        now = 1_000_000_000.0
        old = now - journal_module.KEEP_SECONDS - 1
        big = "x" * 10_000
        state.journal.write("1t1", [_entry("s", "old", old)])
        state.journal.write("1t1", [_entry("s", f"r{i}", now - 100 + i, source=big) for i in range(5)])
        monkeypatch.setattr(journal_module, "BYTES_KEPT", 25_000)  # room for two of them
        assert state.journal.trim(now) == 4
        assert [run["run_id"] for run in state.journal.summaries("s")] == ["r4", "r3"]
        assert state.journal.trim(now) == 0
    finally:
        state.close()


def test_a_version_13_state_db_gains_the_journal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        conn.execute("DROP TABLE run_journal")
        conn.execute("ALTER TABLE session_holds DROP COLUMN tenant")
        conn.execute("ALTER TABLE session_holds DROP COLUMN client")
        conn.execute("INSERT INTO session_holds (session_id, holder, opened_at) VALUES ('s', '1t1', 5.0)")
        conn.execute("PRAGMA user_version = 13")
    conn.close()
    reopened = State(state)
    try:
        reopened.journal.write("1t1", [_entry("s", "r", 1.0)])
        assert [run["run_id"] for run in reopened.journal.summaries("s")] == ["r"]
    finally:
        reopened.close()
    with sqlite3.connect(state / "state.db") as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        held = conn.execute("SELECT session_id, tenant, client FROM session_holds").fetchall()
    conn.close()
    assert version == SCHEMA_VERSION and held == [("s", None, None)]


def test_a_version_14_state_db_gains_the_count_of_bash_table_writes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        for (trigger,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE bash_changes")
        conn.execute("PRAGMA user_version = 14")
    conn.close()
    State(state).close()
    with sqlite3.connect(state / "state.db") as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        conn.execute(
            "INSERT INTO notifications (session_id, process_id, kind, seq, command, text, created_at)"
            " VALUES ('s', 'p_1', 'completion', 0, 'true', 'done', 0)"
        )
        conn.execute("UPDATE notifications SET delivered_at = 1 WHERE process_id = 'p_1'")
        conn.execute("DELETE FROM notifications")
        (count,) = conn.execute("SELECT n FROM bash_changes").fetchone()
    conn.close()
    assert version == SCHEMA_VERSION and count == 3
