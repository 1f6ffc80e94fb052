"""Audit records: every approval request and the decision it got, per session."""

from __future__ import annotations

import time

from codemode.state._database import Database, host_faults

__all__ = ["ApprovalLog"]


class ApprovalLog:
    """Approval requests and their decisions in the state database (arguments redacted by
    the caller). Every method raises `HostFault` when the database fails."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @host_faults
    def record(
        self,
        *,
        request_id: str,
        session_id: str,
        kind: str,
        tool: str,
        summary: str,
        arguments_json: str,
        rule: str,
        verdict: str,
        reason: str | None,
    ) -> None:
        """Keep one request and its decision."""
        self._db.execute(
            "INSERT OR REPLACE INTO approval_records"
            " (id, session_id, created, kind, tool, summary, arguments, rule, verdict, reason)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (request_id, session_id, time.time(), kind, tool, summary, arguments_json, rule, verdict, reason),
        )

    @host_faults
    def for_session(self, session_id: str) -> list[dict[str, object]]:
        """The session's records, oldest first."""
        with self._db.connection() as conn:
            cursor = conn.execute(
                "SELECT id, created, kind, tool, summary, arguments, rule, verdict, reason"
                " FROM approval_records WHERE session_id = ? ORDER BY created",
                (session_id,),
            )
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
