"""Which host holds a session open, and how each held session ended.

A front whose sessions end with it (the MCP server: an MCP session lives in one server
process) records each session it holds, with that process's identity and place
(``<pid>t<start>@<place>``, `codemode.sandbox.placed_identity`). When the session ends its row
says why. A host that starts ends the sessions of holders of its place that died without ending
them (`ProcessManager.maintain`), and a front asked about a session id it does not hold can say
how that session ended.

The rows live where sessions are shared: the state directory's SQLite, or the shared
PostgreSQL database (`codemode.state._postgres`) when hosts on several machines serve them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from codemode.state._database import SqlConnection

EndReason = Literal["closed", "expired", "server_stopped", "server_died"]
"""Why a held session ended: the client closed it (MCP ``DELETE``), it was idle past the
server's idle timeout, its server stopped (and ended it), or its server died without ending it
(found by the next host on the state directory)."""

KEEP_SECONDS = 30 * 24 * 3600
"""How long the row of an ended session is kept (to answer for its id)."""

BEAT_SECONDS = 10.0
"""How often a front holding sessions in a shared database says it is alive (`beat`)."""

STALE_SECONDS = 60.0
"""A front silent this long is dead: its sessions end (`end_stale`). Six beats."""


@dataclass(frozen=True)
class SessionEnd:
    """How a held session ended: ``reason``, when (seconds since the epoch), and the pid of the
    process that held it."""

    reason: EndReason
    ended_at: float
    holder_pid: int


@dataclass(frozen=True)
class HeldSession:
    """A session some front holds open now: which process (``<pid>t<start>``), since when
    (seconds since the epoch), for which tenant and client (None when not told)."""

    session_id: str
    holder: str
    opened_at: float
    tenant: str | None
    client: str | None


def hold(
    conn: SqlConnection,
    session_id: str,
    holder: str,
    tenant: str | None = None,
    client: str | None = None,
) -> None:
    """Record that ``holder`` (``<pid>t<start>@<place>``) holds ``session_id`` open (again, if it had
    ended), for ``tenant`` and its ``client`` (what every front's console shows)."""
    conn.execute(
        "INSERT INTO session_holds (session_id, holder, opened_at, tenant, client) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, opened_at = excluded.opened_at,"
        " tenant = excluded.tenant, client = excluded.client, ended_at = NULL, reason = NULL",
        (session_id, holder, time.time(), tenant, client),
    )


def open_holds(conn: SqlConnection, limit: int) -> list[HeldSession]:
    """The sessions held open now (by any front on the state directory), the newest
    ``limit``."""
    rows = conn.execute(
        "SELECT session_id, holder, opened_at, tenant, client FROM session_holds WHERE ended_at IS NULL"
        " ORDER BY opened_at DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [HeldSession(str(r[0]), str(r[1]), float(r[2]), r[3], r[4]) for r in rows]


def end(conn: SqlConnection, session_id: str, holder: str, reason: EndReason) -> bool:
    """Record that ``holder``'s hold of a session ended (the first end recorded wins); False
    when it was not held, had ended already, or is held by another front now (a front cut off
    from the shared database whose session moved meanwhile never ends its new holder's hold)."""
    cur = conn.execute(
        "UPDATE session_holds SET ended_at = ?, reason = ? WHERE session_id = ? AND holder = ?"
        " AND ended_at IS NULL",
        (time.time(), reason, session_id, holder),
    )
    return cur.rowcount > 0


def ending(conn: SqlConnection, session_id: str) -> SessionEnd | None:
    """How ``session_id`` ended; None when it is still held or was never held."""
    row = conn.execute(
        "SELECT holder, ended_at, reason FROM session_holds WHERE session_id = ? AND ended_at IS NOT NULL",
        (session_id,),
    ).fetchone()
    if row is None:
        return None
    holder, ended_at, reason = row
    pid = str(holder).partition("t")[0]
    return SessionEnd(reason=reason, ended_at=float(ended_at), holder_pid=int(pid) if pid.isdigit() else 0)


def held_by(conn: SqlConnection, holder: str) -> frozenset[str]:
    """The sessions ``holder`` holds open now, as the database says."""
    rows = conn.execute(
        "SELECT session_id FROM session_holds WHERE holder = ? AND ended_at IS NULL", (holder,)
    ).fetchall()
    return frozenset(str(row[0]) for row in rows)


def held(conn: SqlConnection) -> list[tuple[str, str]]:
    """``(session_id, holder)`` of every session still held."""
    rows = conn.execute("SELECT session_id, holder FROM session_holds WHERE ended_at IS NULL").fetchall()
    return [(str(session), str(holder)) for session, holder in rows]


def expire(conn: SqlConnection, before: float) -> int:
    """Remove the rows of sessions that ended before ``before`` (and their resume secrets); how many."""
    conn.execute(
        "DELETE FROM session_resume WHERE session_id IN (SELECT session_id FROM session_holds WHERE ended_at < ?)",
        (before,),
    )
    return conn.execute("DELETE FROM session_holds WHERE ended_at < ?", (before,)).rowcount


def beat(conn: SqlConnection, holder: str, now: float) -> None:
    """Record that front ``holder`` is alive at ``now`` (shared database only: its
    ``front_beats`` table). A front whose machine died stops beating; `end_stale` ends its
    sessions from any other machine, where its pid cannot be checked."""
    conn.execute(
        "INSERT INTO front_beats (holder, seen_at) VALUES (?, ?)"
        " ON CONFLICT (holder) DO UPDATE SET seen_at = excluded.seen_at",
        (holder, now),
    )


def place_alive(conn: SqlConnection, holder: str, now: float) -> bool:
    """Whether a front of ``holder``'s place (its machine: ``<pid>t<start>@<place>``) said it is
    alive within `STALE_SECONDS` of ``now`` (shared database only): a front that restarted
    there left its background processes running under their supervisors."""
    place = holder.rpartition("@")[2]
    row = conn.execute(
        "SELECT 1 FROM front_beats WHERE holder LIKE ? AND seen_at >= ? LIMIT 1",
        ("%@" + place, now - STALE_SECONDS),  # a place is hex: nothing in it that LIKE reads
    ).fetchone()
    return row is not None


def end_stale(conn: SqlConnection, now: float, stale_seconds: float = STALE_SECONDS) -> list[str]:
    """End (``server_died``) the sessions of every front whose last beat is older than
    ``stale_seconds``, and forget those fronts; the sessions ended (shared database only)."""
    ended: list[str] = []
    stale = conn.execute(
        "SELECT holder FROM front_beats WHERE seen_at < ?", (now - stale_seconds,)
    ).fetchall()
    for (holder,) in stale:
        rows = conn.execute(
            "UPDATE session_holds SET ended_at = ?, reason = 'server_died' WHERE holder = ? AND ended_at IS NULL"
            " RETURNING session_id",
            (now, holder),
        ).fetchall()
        ended.extend(str(row[0]) for row in rows)
        conn.execute(
            "DELETE FROM front_beats WHERE holder = ? AND seen_at < ?", (holder, now - stale_seconds)
        )
    return ended


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def issue_resume(conn: SqlConnection, session_id: str, tenant: str) -> str:
    """A new resume secret for ``session_id``, issued to ``tenant``; the session's earlier one
    stops working. Only its SHA-256 is kept (a 256-bit random secret needs no slow hash)."""
    secret = secrets.token_urlsafe(32)
    conn.execute("DELETE FROM session_resume WHERE session_id = ?", (session_id,))
    conn.execute(
        "INSERT INTO session_resume (secret_hash, session_id, tenant, issued_at) VALUES (?, ?, ?, ?)",
        (_digest(secret), session_id, tenant, time.time()),
    )
    return secret


def resume_target(conn: SqlConnection, secret: str, tenant: str) -> tuple[str, bool] | None:
    """The session ``secret`` resumes for ``tenant``, and whether a front still holds it open
    (it can be resumed once it has ended: its holder closed it, or died); None when the secret
    is no held session's of this tenant (a wrong, replaced or expired secret, one of a session
    that never ran anything, or another tenant's: not told apart)."""
    row = conn.execute(
        "SELECT session_id, tenant FROM session_resume WHERE secret_hash = ?", (_digest(secret),)
    ).fetchone()
    if row is None or not hmac.compare_digest(str(row[1]).encode(), tenant.encode()):
        return None
    session_id = str(row[0])
    held_row = conn.execute(
        "SELECT ended_at FROM session_holds WHERE session_id = ?", (session_id,)
    ).fetchone()
    if held_row is None:  # never held: it never ran anything, so there is nothing to resume
        return None
    return session_id, held_row[0] is None
