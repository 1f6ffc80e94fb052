"""Programs as a console shows them, shared by every front on the state directory.

Each front's console keeps the programs of its own sessions in memory while they run
(`codemode.console`) and writes them here, a summary and a detail as JSON per program, at most
about twice a second: so the console of any front (another replica, a restarted server) lists
every session's programs and follows one another front runs. Each write takes the next
``seq``; a console polls what changed since the last ``seq`` it saw.

Bounded: the newest `RUNS_KEPT` programs per session, nothing older than `KEEP_SECONDS`, and
at most `BYTES_KEPT` of JSON in all (the oldest go first). A detail is cut by its writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from codemode.state._database import SqlDatabase, host_faults

__all__ = ["JournalChange", "JournalEntry", "RunJournal"]

RUNS_KEPT = 100  # programs kept per session (the newest)
KEEP_SECONDS = 7 * 24 * 3600  # a program not written for this long goes
BYTES_KEPT = 256 * 1024 * 1024  # summaries and details of every kept program, the oldest go first


@dataclass(frozen=True)
class JournalEntry:
    """One program as its front's console sees it now (a write: new, or newer)."""

    session_id: str
    run_id: str
    tenant: str | None
    started: float  # seconds since the epoch
    status: str  # running, ok, error
    summary: dict[str, object]
    detail: dict[str, object]


@dataclass(frozen=True)
class JournalChange:
    """A program written since a console last looked (`RunJournal.changes`)."""

    seq: int
    holder: str  # the front that wrote it (`codemode.sandbox.process_identity`)
    session_id: str
    run_id: str
    tenant: str | None
    summary: dict[str, object]


class RunJournal:
    """The programs every front's console shows, in the state database. Every method raises
    `HostFault` when the database fails."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    @host_faults
    def write(self, holder: str, entries: Sequence[JournalEntry]) -> None:
        """Keep ``entries`` (new or newer) as written by front ``holder``, in one transaction;
        each session keeps its newest `RUNS_KEPT`."""
        if not entries:
            return
        with self._db.transaction("run_journal") as conn:
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM run_journal").fetchone()
            seq = int(seq)
            sessions = set()
            for entry in entries:
                seq += 1
                summary = json.dumps(entry.summary)
                detail = json.dumps(entry.detail)
                conn.execute(
                    "INSERT INTO run_journal"
                    " (session_id, run_id, seq, holder, tenant, started, status, size, summary, detail)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, run_id) DO UPDATE SET"
                    " seq = excluded.seq, holder = excluded.holder, status = excluded.status,"
                    " size = excluded.size, summary = excluded.summary, detail = excluded.detail",
                    (
                        entry.session_id,
                        entry.run_id,
                        seq,
                        holder,
                        entry.tenant,
                        entry.started,
                        entry.status,
                        len(summary) + len(detail),
                        summary,
                        detail,
                    ),
                )
                sessions.add(entry.session_id)
            for session in sessions:
                conn.execute(
                    "DELETE FROM run_journal WHERE session_id = ? AND id NOT IN (SELECT id FROM run_journal"
                    " WHERE session_id = ? ORDER BY started DESC LIMIT ?)",
                    (session, session, RUNS_KEPT),
                )

    @host_faults
    def summaries(self, session_id: str, limit: int = RUNS_KEPT) -> list[dict[str, object]]:
        """The session's kept programs' summaries, newest first."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT summary FROM run_journal WHERE session_id = ? ORDER BY started DESC LIMIT ?",
                (session_id, limit),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    @host_faults
    def detail(self, session_id: str, run_id: str) -> dict[str, object] | None:
        """A kept program's detail, or None."""
        with self._db.connection() as conn:
            row = conn.execute(
                "SELECT detail FROM run_journal WHERE session_id = ? AND run_id = ?", (session_id, run_id)
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    @host_faults
    def counts(self, session_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """For each of ``session_ids`` with kept programs: how many, and the newest's start."""
        found: dict[str, tuple[int, float]] = {}
        with self._db.connection() as conn:
            for start in range(0, len(session_ids), 500):  # SQLite's bound on parameters
                chunk = session_ids[start : start + 500]
                marks = ", ".join("?" for _ in chunk)
                rows = conn.execute(
                    f"SELECT session_id, COUNT(*), MAX(started) FROM run_journal WHERE session_id IN ({marks})"
                    " GROUP BY session_id",
                    tuple(chunk),
                ).fetchall()
                found.update((str(r[0]), (int(r[1]), float(r[2]))) for r in rows)
        return found

    @host_faults
    def last_seq(self) -> int:
        """The ``seq`` of the newest write (0: none)."""
        with self._db.connection() as conn:
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM run_journal").fetchone()
        return int(seq)

    @host_faults
    def changes(self, after: int, limit: int = 200) -> list[JournalChange]:
        """Programs written since ``seq`` ``after``, oldest first, at most ``limit``."""
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT seq, holder, session_id, run_id, tenant, summary FROM run_journal WHERE seq > ?"
                " ORDER BY seq LIMIT ?",
                (after, limit),
            ).fetchall()
        return [
            JournalChange(int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], json.loads(r[5])) for r in rows
        ]

    @host_faults
    def trim(self, now: float | None = None) -> int:
        """Remove programs past `KEEP_SECONDS`, then the oldest while all of them hold more
        than `BYTES_KEPT`; how many went."""
        cutoff = (time.time() if now is None else now) - KEEP_SECONDS
        with self._db.transaction("run_journal") as conn:
            removed = conn.execute("DELETE FROM run_journal WHERE started < ?", (cutoff,)).rowcount
            (total,) = conn.execute("SELECT COALESCE(SUM(size), 0) FROM run_journal").fetchone()
            total = int(total)
            if total > BYTES_KEPT:
                over = total - BYTES_KEPT
                doomed: list[int] = []
                for row_id, size in conn.execute("SELECT id, size FROM run_journal ORDER BY started"):
                    doomed.append(row_id)
                    over -= size
                    if over <= 0:
                        break
                for row_id in doomed:
                    conn.execute("DELETE FROM run_journal WHERE id = ?", (row_id,))
                removed += len(doomed)
        return removed
