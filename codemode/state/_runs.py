"""Run records (a run_code result kept under its session and call id, for replay) and the
sessions seen."""

from __future__ import annotations

import time
from dataclasses import dataclass

from codemode.state._database import SqlDatabase, host_faults

__all__ = ["RunRecord", "RunRecords"]


@dataclass(frozen=True)
class RunRecord:
    """A recorded run: its result (JSON text) and the sha256 of its program's source (None for
    records made before that was kept: they replay unchecked)."""

    result_json: str
    source_sha256: str | None


class RunRecords:
    """Run records and sessions in the state database.

    Records are keyed by both ids (two columns): a call id never reaches another session's
    record, whatever characters either id holds. Every method raises `HostFault` when the
    database fails.
    """

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    @host_faults
    def get(self, session_id: str, call_id: str) -> RunRecord | None:
        """The record of the session's call ``call_id``, or None."""
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT result, source_sha256 FROM run_records WHERE session_id = ? AND call_id = ?",
                (session_id, call_id),
            ).fetchone()
        return None if row is None else RunRecord(str(row[0]), None if row[1] is None else str(row[1]))

    @host_faults
    def record(
        self, session_id: str, call_id: str, result_json: str, source_sha256: str | None = None
    ) -> None:
        """Record the result of the session's call ``call_id``. The first record wins."""
        self._db.execute(
            "INSERT INTO run_records (session_id, call_id, result, created, source_sha256)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (session_id, call_id, result_json, time.time(), source_sha256),
        )

    @host_faults
    def expire(self, before: float) -> int:
        """Remove records made before ``before`` (seconds since the epoch); return how many."""
        return self._db.execute("DELETE FROM run_records WHERE created < ?", (before,))

    @host_faults
    def note_session(self, session_id: str) -> None:
        """Remember that a session ran something (once; later calls change nothing)."""
        self._db.execute(
            "INSERT INTO sessions (session_id, first_seen) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (session_id, time.time()),
        )

    @host_faults
    def has_session(self, session_id: str) -> bool:
        """Whether this database keeps anything of this session: a run, a run record or a store
        value (`State.has_session` asks the archive too)."""
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)"
                " OR EXISTS (SELECT 1 FROM run_records WHERE session_id = ?)"
                " OR EXISTS (SELECT 1 FROM store_values WHERE session_id = ?)",
                (session_id, session_id, session_id),
            ).fetchone()
        return bool(row[0])
