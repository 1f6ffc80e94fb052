"""Audit records: every approval request and the decision it got, per session; what a person
did through the console."""

from __future__ import annotations

import time
from dataclasses import dataclass

from codemode.state._database import SqlDatabase, host_faults

_DETAIL_MAX_CHARS = 2000  # a recorded action's detail (keystrokes sent, a reason) is cut to this

__all__ = ["ApprovalLog", "OperatorAction", "OperatorLog"]


class ApprovalLog:
    """Approval requests and their decisions in the state database (arguments redacted by
    the caller). Every method raises `HostFault` when the database fails."""

    def __init__(self, db: SqlDatabase) -> None:
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
            "INSERT INTO approval_records"
            " (id, session_id, created, kind, tool, summary, arguments, rule, verdict, reason)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
            " session_id = excluded.session_id, created = excluded.created, kind = excluded.kind,"
            " tool = excluded.tool, summary = excluded.summary, arguments = excluded.arguments,"
            " rule = excluded.rule, verdict = excluded.verdict, reason = excluded.reason",
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


@dataclass(frozen=True)
class OperatorAction:
    """One thing a person did through the console, as recorded."""

    at: float  # seconds since the epoch
    tenant: str
    session_id: str | None
    action: str  # takeover, handback, input, stop, approval, trash_restore, trash_empty
    target: str  # what it was done to: a process id, an approval id, a trash entry
    detail: str  # what was sent or decided (redacted by the caller), cut


class OperatorLog:
    """What people did through the console, in the state database. Every method raises
    `HostFault` when the database fails."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    @host_faults
    def record(self, action: OperatorAction) -> None:
        """Keep one action (its detail cut to 2,000 characters)."""
        self._db.execute(
            "INSERT INTO operator_actions (at, tenant, session_id, action, target, detail)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                action.at,
                action.tenant,
                action.session_id,
                action.action,
                action.target,
                action.detail[:_DETAIL_MAX_CHARS],
            ),
        )

    @host_faults
    def recent(self, limit: int, tenant: str | None = None) -> list[OperatorAction]:
        """The newest ``limit`` actions (of one tenant, or all), newest first."""
        query = "SELECT at, tenant, session_id, action, target, detail FROM operator_actions"
        params: tuple[object, ...] = ()
        if tenant is not None:
            query += " WHERE tenant = ?"
            params = (tenant,)
        with self._db.connection() as conn:
            rows = conn.execute(query + " ORDER BY id DESC LIMIT ?", (*params, limit)).fetchall()
        return [OperatorAction(float(r[0]), str(r[1]), r[2], str(r[3]), str(r[4]), str(r[5])) for r in rows]
