"""Completions and other notifications: what a session is told about its background processes
(a completion, a keyword report, a Monitor watcher's event), queued in the state database until
acknowledged; redacted as one result when read, delivered once (whoever acks first)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codemode._json import JsonObject
from codemode.errors import ToolError
from codemode.state import Archive, ProcessRecord, Redactor
from codemode.state import process_records as _records
from codemode.tools._terminal import clean_terminal_text

if TYPE_CHECKING:
    from codemode.tools._verification import VerificationData
    from codemode.tools.bash._foreground import Running


@dataclass(frozen=True)
class Notification:
    """Something a session is told: a background process's completion, a keyword report of
    one still running, or a Monitor watcher's event; queued until acknowledged.

    Attributes:
        id: Pass to :meth:`ProcessManager.ack`.
        process_id: The process (or watcher).
        command: Its command line.
        exit_code: Its exit code (a completion or a watcher's last event); None when it cannot
            be known or it has not ended.
        text: One line for the model (redacted).
        kind: ``completion``, ``report`` or ``event``.
        seq: The event's number (a watcher's ``after`` cursor), the report's; 0 for a completion.
        data: Details (redacted): a completion's ``output_tail`` (its last 31 KiB) and
            ``verification``; a report's ``keyword``, ``line`` and ``output`` (the latest
            8 KiB); an event's ``lines`` and ``suppressed`` (lines the rate limit dropped
            before it), or ``final`` for a watcher's end.
    """

    id: int
    process_id: str
    command: str
    exit_code: int | None
    text: str
    kind: str = "completion"
    seq: int = 0
    data: JsonObject | None = None


def _redact_note(
    text: str, data: Mapping[str, object] | None, redactor: Redactor
) -> tuple[str, dict[str, object] | None]:
    """A notification's text and data, redacted as one result: a value found by its context in
    one of its texts (``password = 'X'`` in a report's output) is cut in the others (its line)."""
    if data is None:
        return redactor.redact(text), None
    strings = {k: v for k, v in data.items() if isinstance(v, str)}
    keys = list(strings)
    texts = [
        clean_terminal_text(v.encode()) if k in ("output", "output_tail") else v for k, v in strings.items()
    ]
    shown = redactor.redact_together([text, *texts])
    return shown[0], {
        k: shown[1 + keys.index(k)] if k in keys else _redact_data(v, redactor) for k, v in data.items()
    }


def _redact_data(value: Any, redactor: Redactor) -> Any:
    """Redact the strings of notification data (output is cleaned as a terminal shows it)."""
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, list):
        return [_redact_data(v, redactor) for v in value]
    if isinstance(value, dict):
        return {
            k: redactor.redact(clean_terminal_text(v.encode())) if k in ("output", "output_tail") and isinstance(v, str)
            else _redact_data(v, redactor)
            for k, v in value.items()
        }  # fmt: skip
    return value


# Quiet sessions remembered at most (then forgotten all at once, and found again as they ask):
# a front that runs for days without a background process must not keep every session it saw.
_QUIET_KEPT = 10_000


class QuietSessions:
    """The sessions last found with no process live and no notification pending, as of a count
    of the bash tables' writes (`process_records.changes`, kept by triggers: a supervisor's
    writes count too). While the count stands they still have none, so every result of theirs
    is answered with one small read, whatever other sessions asked in between (a front with
    1,000 sessions interleaves them). The count is read on a connection of its own: a result
    does not wait for the manager's, which a thread may hold.
    """

    def __init__(self, db_path: str | Path) -> None:
        self._conn = _records.connect(db_path)
        self._lock = threading.Lock()
        self._changes = -1  # the count the sessions below were found quiet at
        self._sessions: set[str] = set()

    def changes(self) -> int:
        """The bash tables' write count now."""
        with self._lock:
            return _records.changes(self._conn)

    def is_quiet(self, session_id: str, changes: int) -> bool:
        """Whether the session was found quiet at this count."""
        with self._lock:
            return changes == self._changes and session_id in self._sessions

    def close(self) -> None:
        """Close its connection (the manager's end)."""
        with self._lock:
            self._conn.close()

    def found_quiet(self, session_id: str, changes: int) -> None:
        """The session had nothing live or pending when looked at after the count read
        ``changes`` (a write since then moves the count on: it is looked at again)."""
        with self._lock:
            if changes != self._changes or len(self._sessions) >= _QUIET_KEPT:
                self._changes = changes
                self._sessions = set()
            self._sessions.add(session_id)


class Completions:
    """The :class:`ProcessManager`'s notification queue (a mixin: the manager holds the state)."""

    _archive: Archive
    _redactor: Redactor
    _adopted: dict[str, Running]
    _quiet: QuietSessions

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...
        def _reap_adopted(self) -> None: ...
        def _network_note(self, process_id: str) -> str | None: ...
        def _verification(self, record: ProcessRecord) -> VerificationData | None: ...
        def _published_pending(self, session_id: str) -> list[Notification]: ...
        def _ack_published(self, session_id: str, ids: list[int]) -> list[int]: ...

    def pending_notifications(self, session_id: str, *, reconcile: bool = True) -> list[Notification]:
        """Notifications queued for a session and not yet acknowledged, oldest first; then
        those other machines published for it (negative ids: `Elsewhere`).

        Args:
            session_id: The session.
            reconcile: Look at live records first (a supervisor that died leaves no record of
                its end until then); a caller that asks often does it now and then.
        """
        return self._local_pending(session_id, reconcile) + self._published_pending(session_id)

    def _local_pending(self, session_id: str, reconcile: bool) -> list[Notification]:
        # Every result asks, so the common answer (nothing) is cheap: a session found with
        # nothing live or pending still has nothing while the bash tables are unchanged.
        changes = self._quiet.changes() if reconcile and not self._adopted else None
        if changes is not None and self._quiet.is_quiet(session_id, changes):
            return []
        with self._db() as conn:
            live = _records.live_records(conn, session_id) if reconcile else []
        for record in live:
            self._reconcile(record)
        if reconcile:
            self._reap_adopted()
        with self._db() as conn:
            rows = _records.pending(conn, session_id)
        if changes is not None and not live and not rows and not self._adopted:
            self._quiet.found_quiet(session_id, changes)
        if any(r["kind"] == "completion" for r in rows):
            # A verification command's completion carries its summary: settle it first.
            for row in rows:
                if row["kind"] == "completion":
                    with self._db() as conn:
                        ended = _records.get(conn, row["process_id"])
                    if ended is not None and ended.verification is None:
                        self._verification(ended)
            with self._db() as conn:
                rows = _records.pending(conn, session_id)
        return [self._notification(r) for r in rows]

    def notifications_since(self, after: int, limit: int = 200) -> list[tuple[str, Notification]]:
        """Every session's notifications with an id above ``after`` (below 0: the newest
        ``limit``), delivered or not, oldest first, each with its session: what a console
        shows; nothing is acknowledged."""
        with self._db() as conn:
            rows = _records.since(conn, after, limit)
        return [(str(r["session_id"]), self._notification(r)) for r in rows]

    def pending_changed(self) -> int:
        """A number that changes whenever another connection committed to the database (cheap:
        ``PRAGMA data_version``), so a poller need only look again when it changes."""
        with self._db() as conn:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version)

    def _notification(self, row: sqlite3.Row) -> Notification:
        data: JsonObject | None = json.loads(row["data"]) if row["data"] else None
        text, data = _redact_note(row["text"], data, self._redactor)
        if row["kind"] == "completion":
            with self._db() as conn:
                record = _records.get(conn, row["process_id"])
            verification = (
                json.loads(record.verification) if record is not None and record.verification else None
            )
            if verification is not None:
                data = {**(data or {}), "verification": verification}
            network = self._network_note(row["process_id"])
            if network is not None:
                text = f"{text}\n{network}"
        return Notification(
            row["id"],
            row["process_id"],
            row["command"],
            row["exit_code"],
            text,
            row["kind"],
            row["seq"],
            data,
        )

    def ack(self, session_id: str, ids: list[int]) -> list[int]:
        """Mark notifications delivered; they are never returned again (also after a restart).

        Returns:
            The ids this call marked: one another channel (or a read) delivered first is left
            out, so whoever acks first is the one to deliver it.
        """
        published = [i for i in ids if i < 0]  # marked after this front's own (below)
        ids = [i for i in ids if i > 0]
        if not ids:
            return self._ack_published(session_id, published)
        marks = ", ".join("?" for _ in ids)
        with self._db() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                fresh = [
                    row["id"]
                    for row in conn.execute(
                        f"SELECT id FROM notifications WHERE session_id = ? AND delivered_at IS NULL AND id IN ({marks})",
                        (session_id, *ids),
                    )
                ]
                _records.ack(conn, session_id, fresh)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            rows = (
                conn.execute(
                    "SELECT p.log_ref FROM bash_processes p JOIN notifications n USING (process_id) "
                    f"WHERE n.kind = 'completion' AND n.id IN ({', '.join('?' for _ in fresh)})",
                    tuple(fresh),
                ).fetchall()
                if fresh
                else []
            )
        for row in rows:
            if row["log_ref"]:
                with contextlib.suppress(ToolError):
                    self._archive.pin(row["log_ref"], False)
        return fresh + self._ack_published(session_id, published)
