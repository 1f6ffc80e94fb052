"""Processes across machines: with a shared database, a session may move to another front
while its background processes run on; the processes stay where they started.

Every front publishes (`Elsewhere.publish`, about once a second from the HTTP front) the index
of its processes and the notifications of sessions it no longer holds; a front asked about a
process it does not run answers from the index: where it runs, how it ended, or that it was lost
with its machine (no front of that machine heard from for `session_holds.STALE_SECONDS`). Published notifications
reach the session's new front by ``LISTEN/NOTIFY`` (`codemode.state._elsewhere.CHANNEL`) and
are delivered there like its own, under negative ids.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from typing import TYPE_CHECKING

from codemode.errors import HostFault, ProcessNotFound, ToolError
from codemode.sandbox import placed_identity
from codemode.state import Archive, ProcessRecord, Redactor, SqlDatabase, host_faults
from codemode.state import elsewhere_records as elsewhere
from codemode.state import process_records as _records
from codemode.state import session_holds as _holds
from codemode.tools.bash._completions import Notification

log = logging.getLogger("codemode.bash")

_PUBLISH_MARGIN_SECONDS = 5.0  # records changed this long before the last publication go again
_MAX_ARRIVED = 100_000  # sessions remembered as having published notifications to look at


class Elsewhere:
    """The :class:`ProcessManager`'s view of other machines (a mixin: the manager holds the
    state)."""

    _archive: Archive
    _redactor: Redactor
    _sessions: SqlDatabase | None

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...
        def _notification(self, row: sqlite3.Row) -> Notification: ...
        def _log_finished(self, ref: str) -> bool: ...
        def ack(self, session_id: str, ids: list[int]) -> list[int]: ...

    def _start_listening(self) -> None:
        """With a shared database, listen for notifications published for sessions (a thread
        of its own, until `_stop_listening`)."""
        self._arrived: set[str] = set()  # sessions with published notifications to look at
        self._arrived_lock = threading.Lock()
        self._listening = False
        self._stop_listen = threading.Event()
        self._published_at = 0.0
        if self._sessions is None:
            return
        sessions = self._sessions
        stop = self._stop_listen

        def listen() -> None:
            while not stop.is_set():
                try:
                    for session_id in sessions.listen(elsewhere.CHANNEL, stop):
                        found = {session_id} if session_id else self._sessions_with_pending()
                        with self._arrived_lock:
                            self._arrived |= found
                            self._listening = self._listening or not session_id
                            while len(self._arrived) > _MAX_ARRIVED:  # sessions never served here
                                self._arrived.pop()
                except Exception:  # never the end of listening: log it, and listen again
                    log.exception("listening for published notifications failed")
                    stop.wait(1.0)

        threading.Thread(target=listen, name="codemode-notes", daemon=True).start()

    def _sessions_with_pending(self) -> set[str]:
        """(Re)connected: what was published while nobody listened, looked up once, here in the
        listener's thread (never on a result's path)."""
        assert self._sessions is not None
        try:
            with self._sessions.connection() as pg:
                return elsewhere.sessions_with_pending(pg)
        except Exception as exc:  # the listener reconnects and asks again
            log.warning("could not read which sessions have published notifications: %s", exc)
            return set()

    @property
    def listening(self) -> bool:
        """Whether notifications published by other fronts are listened for now (a shared
        database, connected once)."""
        with self._arrived_lock:
            return self._listening

    def _stop_listening(self) -> None:
        self._stop_listen.set()

    # -- publishing -------------------------------------------------------------------------

    @host_faults
    def publish(self) -> int:
        """Publish this front's processes (those changed since the last time) and the
        notifications of sessions it does not hold, which are then delivered here no more
        (blocking; shared database only). Returns how many notifications were published.

        Raises:
            HostFault: A database failed.
        """
        if self._sessions is None:
            return 0
        me = placed_identity()
        started = time.time()
        with self._db() as conn:
            live = _records.live_records(conn)
            undelivered = _records.undelivered(conn)
        mine: set[str] = set()
        if live or undelivered:
            with self._sessions.connection() as pg:
                mine = elsewhere.sessions_held_by(pg, me)
        if any(record.session_id not in mine for record in live):
            for record in live:
                if record.session_id not in mine:
                    self._reconcile(record)  # a supervisor that died: its completion is queued now
            with self._db() as conn:
                undelivered = _records.undelivered(conn)
        with self._db() as conn:
            changed = _records.changed_since(conn, self._published_at - _PUBLISH_MARGIN_SECONDS)
        notes = [row for row in undelivered if row["session_id"] not in mine]
        for record in changed:
            if not record.live and record.log_ref and not self._log_finished(record.log_ref):
                try:
                    self._archive.finish_log(record.log_ref)  # its copy goes to the shared database
                except ToolError:
                    pass  # its file is gone: nothing to copy
                except HostFault as exc:  # one log's trouble holds up no one else's
                    log.warning("could not finish the log of process %s: %s", record.process_id, exc)
        index = [
            (
                r.process_id,
                r.session_id,
                self._redactor.one_line(r.command, 200),
                r.state,
                r.exit_code,
                r.log_ref,
                r.started_at,
                r.ended_at,
            )
            for r in changed
        ]
        # Claimed here first (as a delivery is), so that a front on this state directory that
        # delivers one meanwhile keeps it, and none is published and delivered here both.
        by_session: dict[str, list[int]] = {}
        for row in notes:
            by_session.setdefault(str(row["session_id"]), []).append(int(row["id"]))
        claimed = {i for session_id, ids in by_session.items() for i in self.ack(session_id, ids)}
        published = [self._published(row) for row in notes if int(row["id"]) in claimed]
        if index or published:
            try:
                with self._sessions.transaction("shared_notifications") as pg:
                    elsewhere.publish_processes(pg, me, index)
                    elsewhere.publish_notes(pg, published)
            except BaseException:
                self._unclaim(sorted(claimed))  # delivered here after all, or published next time
                raise
        self._published_at = started
        return len(published)

    def _unclaim(self, ids: list[int]) -> None:
        """Make claimed notifications pending again (and their logs pinned again)."""
        if not ids:
            return
        marks = ", ".join("?" for _ in ids)
        with self._db() as conn:
            conn.execute(f"UPDATE notifications SET delivered_at = NULL WHERE id IN ({marks})", tuple(ids))
            refs = conn.execute(
                "SELECT p.log_ref FROM bash_processes p JOIN notifications n USING (process_id)"
                f" WHERE n.kind = 'completion' AND p.log_ref IS NOT NULL AND n.id IN ({marks})",
                tuple(ids),
            ).fetchall()
        for (ref,) in refs:
            with contextlib.suppress(ToolError):
                self._archive.pin(ref, True)

    def _published(self, row: sqlite3.Row) -> elsewhere.PublishedNote:
        note = self._notification(row)  # redacted, with its verification and network notes
        return elsewhere.PublishedNote(
            id=0,
            session_id=str(row["session_id"]),
            process_id=note.process_id,
            command=self._redactor.redact(note.command),
            exit_code=note.exit_code,
            text=note.text,
            kind=note.kind,
            seq=note.seq,
            data=note.data,
        )

    # -- answering --------------------------------------------------------------------------

    @host_faults
    def _elsewhere_error(self, session_id: str, process_id: str) -> ToolError | None:
        """What to tell a session about a process this front does not run: from the shared
        index, where it runs, how it ended, or that it was lost; None when no front published
        it for this session."""
        if self._sessions is None:
            return None
        with self._sessions.connection() as pg:
            found = elsewhere.find_process(pg, process_id)
            alive = found is not None and _holds.place_alive(pg, found.holder, time.time())
        if found is None or found.session_id != session_id:
            return None
        data = {"process_id": process_id, "machine": found.holder, "state": found.state}
        if found.state not in _records.LIVE_STATES:
            log_note = f"; its log is {found.log_ref} (read_archive)" if found.log_ref else ""
            return ProcessNotFound(
                f"process {process_id!r} ran on another machine ({found.holder}) and has ended "
                f"({found.state}, exit code {found.exit_code}){log_note}",
                {**data, "exit_code": found.exit_code, "log_ref": found.log_ref},
            )
        if alive:
            return ProcessNotFound(
                f"process {process_id!r} runs on another machine ({found.holder}), where this session "
                "started it: it cannot be read, stopped or written to from here; its completion will "
                "reach this session here",
                data,
            )
        return ProcessNotFound(
            f"process {process_id!r} was lost: the machine it ran on ({found.holder}) has not been "
            f"heard from for over {int(_holds.STALE_SECONDS)} s; its exit code is unknown",
            {**data, "state": "lost"},
        )

    # -- delivering -------------------------------------------------------------------------

    def _published_pending(self, session_id: str) -> list[Notification]:
        """The session's notifications other fronts published, not yet delivered (negative
        ids); asks the shared database only when the listener was told of some for the
        session (a NOTIFY, or what was pending when it connected), so a result of a session
        with none costs nothing here."""
        if self._sessions is None:
            return []
        with self._arrived_lock:
            if session_id not in self._arrived:
                return []
            self._arrived.discard(session_id)
        try:
            rows = self._fetch_published(session_id)
        except HostFault as exc:  # delivered with a later result; never fails this one
            log.warning("could not read notifications published for session %s: %s", session_id, exc)
            rows = []
            with self._arrived_lock:
                self._arrived.add(session_id)
        if rows:
            with self._arrived_lock:
                self._arrived.add(session_id)  # until they are delivered
        return [
            Notification(-n.id, n.process_id, n.command, n.exit_code, n.text, n.kind, n.seq, n.data)
            for n in rows
        ]

    @host_faults
    def _fetch_published(self, session_id: str) -> list[elsewhere.PublishedNote]:
        assert self._sessions is not None
        with self._sessions.connection() as pg:
            return elsewhere.pending(pg, session_id)

    def _ack_published(self, session_id: str, ids: list[int]) -> list[int]:
        """Mark published notifications (negative ids) delivered; the ids this call marked (none
        when the database failed: they are offered again with a later result)."""
        if self._sessions is None or not ids:
            return []
        try:
            return self._mark_published(session_id, ids)
        except HostFault as exc:
            log.warning("could not mark notifications of session %s delivered: %s", session_id, exc)
            return []

    @host_faults
    def _mark_published(self, session_id: str, ids: list[int]) -> list[int]:
        assert self._sessions is not None
        with self._sessions.connection() as pg:
            return [-i for i in elsewhere.ack(pg, session_id, [-i for i in ids])]
