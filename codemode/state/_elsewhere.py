"""Background processes and their notifications across machines (the shared database only).

A process runs on the machine that started it, and its records stay in that state directory's
SQLite (`_processes`). With a shared database, each front also publishes there:

* ``shared_processes``: an index of its processes (who runs them, their state, exit code and
  log), so that a front serving a session that moved answers for a process of another machine
  with where it runs, how it ended, or that it was lost with its machine;
* ``shared_notifications``: the notifications (completions, reports, events) of sessions it no
  longer holds, each published once (keyed by process, kind and number) with a ``NOTIFY`` on
  `CHANNEL` naming its session, so that the front now holding that session delivers them.

Texts are redacted before they are published, as they would be before a model sees them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from codemode.state._database import SqlConnection

__all__ = [
    "CHANNEL",
    "ElsewhereProcess",
    "PublishedNote",
    "ack",
    "expire",
    "find_process",
    "pending",
    "publish_notes",
    "publish_processes",
    "sessions_held_by",
    "sessions_with_pending",
]

CHANNEL = "codemode_notes"
"""The channel a front notifies with a session id when it published notifications for it."""


@dataclass(frozen=True)
class ElsewhereProcess:
    """A process as the shared index has it: ``holder`` is the front that started it
    (``<pid>t<start>@<place>``); ``state`` is its record's; ``published_at`` when its row was
    last written."""

    process_id: str
    session_id: str
    holder: str
    command: str
    state: str
    exit_code: int | None
    log_ref: str | None
    started_at: float
    ended_at: float | None
    published_at: float


@dataclass(frozen=True)
class PublishedNote:
    """A notification as published: its shared id, what the session is told, and its source."""

    id: int
    session_id: str
    process_id: str
    command: str
    exit_code: int | None
    text: str
    kind: str
    seq: int
    data: Any


def publish_processes(conn: SqlConnection, holder: str, rows: Iterable[Sequence[Any]]) -> None:
    """Write the index rows ``(process_id, session_id, command, state, exit_code, log_ref,
    started_at, ended_at)`` of processes ``holder`` runs."""
    now = time.time()
    for row in rows:
        conn.execute(
            "INSERT INTO shared_processes (process_id, session_id, holder, command, state, exit_code, log_ref,"
            " started_at, ended_at, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (process_id) DO UPDATE SET holder = excluded.holder, state = excluded.state,"
            " exit_code = excluded.exit_code,"
            " log_ref = excluded.log_ref, ended_at = excluded.ended_at, published_at = excluded.published_at",
            (row[0], row[1], holder, *row[2:], now),
        )


def find_process(conn: SqlConnection, process_id: str) -> ElsewhereProcess | None:
    """The index row of ``process_id``; None when no front published it."""
    row = conn.execute(
        "SELECT process_id, session_id, holder, command, state, exit_code, log_ref, started_at, ended_at,"
        " published_at FROM shared_processes WHERE process_id = ?",
        (process_id,),
    ).fetchone()
    return None if row is None else ElsewhereProcess(*row)


def sessions_held_by(conn: SqlConnection, holder: str) -> set[str]:
    """The sessions ``holder`` holds open now."""
    rows = conn.execute(
        "SELECT session_id FROM session_holds WHERE holder = ? AND ended_at IS NULL", (holder,)
    ).fetchall()
    return {str(row[0]) for row in rows}


def publish_notes(conn: SqlConnection, notes: Sequence[PublishedNote]) -> None:
    """Publish notifications (their ``id`` is ignored) and notify each one's session; one
    published before (same process, kind and number) is not published twice. Run it in a
    transaction: the notifications go out when it commits."""
    for note in notes:
        conn.execute(
            "INSERT INTO shared_notifications (session_id, process_id, command, exit_code, text, kind, seq, data,"
            " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (process_id, kind, seq) DO NOTHING",
            (
                note.session_id,
                note.process_id,
                note.command,
                note.exit_code,
                note.text,
                note.kind,
                note.seq,
                None if note.data is None else json.dumps(note.data),
                time.time(),
            ),
        )
    for session_id in sorted({note.session_id for note in notes}):
        conn.execute("SELECT pg_notify(?, ?)", (CHANNEL, session_id))


def pending(conn: SqlConnection, session_id: str) -> list[PublishedNote]:
    """A session's published notifications not yet delivered, oldest first."""
    rows = conn.execute(
        "SELECT id, session_id, process_id, command, exit_code, text, kind, seq, data FROM shared_notifications"
        " WHERE session_id = ? AND delivered_at IS NULL ORDER BY id",
        (session_id,),
    ).fetchall()
    return [
        PublishedNote(
            id=int(row[0]),
            session_id=str(row[1]),
            process_id=str(row[2]),
            command=str(row[3]),
            exit_code=row[4],
            text=str(row[5]),
            kind=str(row[6]),
            seq=int(row[7]),
            data=None if row[8] is None else json.loads(row[8]),
        )
        for row in rows
    ]


def sessions_with_pending(conn: SqlConnection) -> set[str]:
    """The sessions with published notifications not yet delivered."""
    rows = conn.execute(
        "SELECT DISTINCT session_id FROM shared_notifications WHERE delivered_at IS NULL"
    ).fetchall()
    return {str(row[0]) for row in rows}


def ack(conn: SqlConnection, session_id: str, ids: Sequence[int]) -> list[int]:
    """Mark published notifications of a session delivered; the ids this call marked."""
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    rows = conn.execute(
        f"UPDATE shared_notifications SET delivered_at = ? WHERE session_id = ? AND delivered_at IS NULL"
        f" AND id IN ({marks}) RETURNING id",
        (time.time(), session_id, *ids),
    ).fetchall()
    return sorted(int(row[0]) for row in rows)


def expire(conn: SqlConnection, before: float) -> int:
    """Remove index rows of processes that ended before ``before`` and notifications created
    before it; how many rows."""
    removed = conn.execute(
        "DELETE FROM shared_processes WHERE ended_at IS NOT NULL AND ended_at < ?", (before,)
    ).rowcount
    return removed + conn.execute("DELETE FROM shared_notifications WHERE created < ?", (before,)).rowcount
