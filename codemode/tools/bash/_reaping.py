"""Reaping and upkeep: start-up reconcile, log finishing and pinning, expiry of old records,
foreground commands of dead hosts ended; promoted runs reaped; what a session's finished runs
left behind ended with it; sessions held by a host that died ended.

The rule after a crash: a host that starts on a state directory looks at every live record.
One whose supervisor is gone (pid and start time no longer match) is lost, and what is left
of its command is ended. One whose supervisor is alive is kept (re-adopted: any host on the
state directory reads, waits for and stops it through its record), unless its session was
held by a host that died (`hold_session`): that session has ended, so its ``lifecycle:
session`` processes are stopped as its close would have; ``managed`` ones live on.

Held sessions are recorded where sessions are shared (`ProcessManager`'s ``sessions``: the state
directory's database, or a shared PostgreSQL one). A holder is named with its place
(`codemode.sandbox.placed_identity`), so a host judges only holders of its own machine and pid
namespace; those of other machines are theirs to end."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.errors import HostFault, ToolError
from codemode.sandbox import cgroup_kill, cgroup_remove, identity_is_gone, placed_identity
from codemode.state import (
    Archive,
    EndReason,
    HeldSession,
    ProcessRecord,
    SessionEnd,
    SqlConnection,
    SqlDatabase,
)
from codemode.state import process_records as _records
from codemode.state import session_holds as _holds
from codemode.tools.bash._foreground import (
    TERM_GRACE_SECONDS,
    orphaned_foreground_cgroups,
    orphaned_foreground_markers,
    state_tag,
)
from codemode.tools.bash._proctree import terminate_tree

if TYPE_CHECKING:
    from codemode.tools.bash._answers import StoppedAnswer
    from codemode.tools.bash._foreground import Running


_EXPIRE_SECONDS = 30 * 24 * 3600

log = logging.getLogger("codemode.bash")


class Reaping:
    """The :class:`ProcessManager`'s upkeep (a mixin: the manager holds the state)."""

    _adopted: dict[str, Running]
    _archive: Archive
    _leftovers: dict[str, set[str]]
    _lock: threading.Lock
    _sessions: SqlDatabase | None

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...
        def _stop(self, record: ProcessRecord, note: str = "") -> StoppedAnswer: ...
        def publish(self) -> int: ...

    def _holds_db(self) -> contextlib.AbstractContextManager[SqlConnection]:
        """A connection to where held sessions are recorded."""
        return self._db() if self._sessions is None else self._sessions.connection()

    def maintain(self) -> dict[str, int]:
        """Start-up upkeep: reconcile records, finish and pin logs, expire old records (also
        safe later). Run it before the archive's own upkeep (`State.maintain`).

        Terminal records older than 30 days are removed with their logs unless a completion
        is still undelivered; logs of undelivered completions are pinned so the archive's
        compaction and expiry leave them alone.

        Foreground commands left running by a host that died are ended too (found by the
        marker variable, which names their host's pid and start time).

        Sessions held by a host that died are ended: their ``lifecycle: session`` processes
        are stopped (see the module's rule).

        Returns:
            Counts: ``lost`` (records reconciled), ``expired`` (records removed), ``orphans``
            (foreground commands of dead hosts ended), ``ended_sessions`` (sessions of dead
            hosts ended), ``stopped`` (their processes stopped).
        """
        counts = {"lost": 0, "expired": 0, "orphans": 0, "ended_sessions": 0, "stopped": 0}
        with self._holds_db() as conn:
            orphaned = [
                (session, holder) for session, holder in _holds.held(conn) if identity_is_gone(holder)
            ]
            _holds.expire(conn, time.time() - _holds.KEEP_SECONDS)
        for session_id, holder in orphaned:
            counts["stopped"] += self._end_orphaned_session(session_id, holder)
            counts["ended_sessions"] += 1
        with self._db() as conn:
            live = _records.live_records(conn)
        kept_markers: set[str] = set()
        kept_cgroups: set[str] = set()
        for record in live:
            fresh = self._reconcile(record)
            if fresh.state == "lost":
                counts["lost"] += 1
            elif fresh.live:
                # A promoted run outlives the host that started it (its supervisor reads it).
                kept_markers.add(record.marker)
                if record.cgroup:
                    kept_cgroups.add(record.cgroup)
        # Foreground commands of a host that died (SIGKILL) have no reader left: end them.
        # Only those of this state directory: another's promoted runs are recorded only there.
        tag = state_tag(self._archive)
        for marker in orphaned_foreground_markers(tag):
            if marker not in kept_markers:
                terminate_tree(marker, grace_seconds=TERM_GRACE_SECONDS)
                counts["orphans"] += 1
        for cgroup in orphaned_foreground_cgroups(tag):
            if cgroup not in kept_cgroups:
                counts["orphans"] += bool(cgroup_kill(cgroup))
                cgroup_remove(cgroup)
        cutoff = time.time() - _EXPIRE_SECONDS
        with self._db() as conn:
            pending_ids = {
                row["process_id"]
                for row in conn.execute("SELECT process_id FROM notifications WHERE delivered_at IS NULL")
            }
            records = _records.for_session(conn, None)
        for record in records:
            if record.live or record.log_ref is None:
                continue
            if not self._log_finished(record.log_ref):
                with contextlib.suppress(ToolError):
                    self._archive.finish_log(record.log_ref)
            with contextlib.suppress(ToolError):
                self._archive.pin(record.log_ref, record.process_id in pending_ids)
            if (record.ended_at or record.started_at) < cutoff and record.process_id not in pending_ids:
                with self._db() as conn:
                    conn.execute("DELETE FROM bash_processes WHERE process_id = ?", (record.process_id,))
                    conn.execute(
                        "DELETE FROM notifications WHERE process_id = ? AND delivered_at IS NOT NULL",
                        (record.process_id,),
                    )
                counts["expired"] += 1
        return counts

    def _log_finished(self, ref: str) -> bool:
        try:
            return self._archive.entry_info(ref).get("finished") is not None
        except ToolError:
            return True  # expired: nothing to finish

    def _reap_adopted(self) -> None:
        """Reap promoted runs this host started once they have exited (their supervisor
        recorded the status; this host is still their parent)."""
        with self._lock:
            items = list(self._adopted.items())
        for process_id, running in items:
            if running.proc.poll() is not None:
                running.pump.close()
                with self._lock:
                    self._adopted.pop(process_id, None)

    def _end_orphaned_session(self, session_id: str, holder: str) -> int:
        """End a session whose holder died: stop its ``lifecycle: session`` processes (each
        identity checked by `_stop`), record the end; how many were stopped."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        stopped = 0
        for record in live:
            if record.lifecycle == "session":
                with contextlib.suppress(ToolError):
                    self._stop(record)
                    stopped += 1
        with self._holds_db() as conn:
            _holds.end(conn, session_id, holder, "server_died")
        return stopped

    def beat(self, stale_seconds: float = _holds.STALE_SECONDS) -> list[str]:
        """With a shared database: record that this host is alive, and end the sessions of
        hosts silent past ``stale_seconds`` (their machine died: their processes are lost
        with it); the sessions ended. Without one, nothing (pids are checked)."""
        if self._sessions is None:
            return []
        now = time.time()
        with self._sessions.connection() as conn:
            _holds.beat(conn, placed_identity(), now)
            return _holds.end_stale(conn, now, stale_seconds)

    def held_here(self) -> frozenset[str]:
        """The sessions the state says this host holds open now (`session_holds.held_by`)."""
        with self._holds_db() as conn:
            return _holds.held_by(conn, placed_identity())

    def hold_session(self, session_id: str, tenant: str | None = None, client: str | None = None) -> None:
        """Record that this host holds ``session_id`` open (for ``tenant`` and its ``client``),
        so that the session ends with it: when this host dies without closing it, the next
        host on the state directory ends it (`maintain`), stopping its ``lifecycle: session``
        processes."""
        with self._holds_db() as conn:
            _holds.hold(conn, session_id, placed_identity(), tenant, client)

    def held_sessions(self, limit: int) -> list[HeldSession]:
        """The sessions any front on the state directory holds open now, the newest ``limit``."""
        with self._holds_db() as conn:
            return _holds.open_holds(conn, limit)

    def session_end(self, session_id: str) -> SessionEnd | None:
        """How a held session ended (None: still held, or never held)."""
        with self._holds_db() as conn:
            return _holds.ending(conn, session_id)

    def issue_resume(self, session_id: str, tenant: str) -> str:
        """A new resume secret for a held session (`session_holds.issue_resume`)."""
        with self._holds_db() as conn:
            return _holds.issue_resume(conn, session_id, tenant)

    def resume_target(self, secret: str, tenant: str) -> tuple[str, bool] | None:
        """The ended session ``secret`` resumes for ``tenant`` (`session_holds.resume_target`)."""
        with self._holds_db() as conn:
            return _holds.resume_target(conn, secret, tenant)

    async def close_session(self, session_id: str, reason: EndReason = "closed") -> None:
        """Stop the session's ``lifecycle: session`` processes; this host's hold of the session
        ends with ``reason`` (another front's hold of it, if it moved there, is left alone)."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        with anyio.CancelScope(shield=True):
            for record in live:
                if record.lifecycle == "session":
                    with contextlib.suppress(ToolError):
                        await anyio.to_thread.run_sync(self._stop, record)
            await anyio.to_thread.run_sync(self._end_leftovers, session_id)
            await anyio.to_thread.run_sync(self._end_hold, session_id, reason)
            if self._sessions is not None and await anyio.to_thread.run_sync(self._has_processes, session_id):
                # Its processes and notifications, for whichever front serves it next, now (the
                # one-second publication covers the rest: most sessions that close ran none).
                try:
                    await anyio.to_thread.run_sync(self.publish)
                except HostFault as exc:  # the HTTP front publishes again every second
                    log.warning("could not publish session %s to the shared database: %s", session_id, exc)
            if self._sessions is not None:  # its archived text, there for the next front too
                await anyio.to_thread.run_sync(self._archive.flush_copies)

    def _has_processes(self, session_id: str) -> bool:
        with self._db() as conn:
            return bool(_records.for_session(conn, session_id))

    def _end_hold(self, session_id: str, reason: EndReason) -> None:
        with self._holds_db() as conn:
            _holds.end(conn, session_id, placed_identity(), reason)

    def _end_leftovers(self, session_id: str | None) -> None:
        """End what finished foreground runs of one session (None: every session) left running."""
        with self._lock:
            if session_id is None:
                paths = set().union(*self._leftovers.values()) if self._leftovers else set()
                self._leftovers.clear()
            else:
                paths = self._leftovers.pop(session_id, set())
        for path in paths:
            cgroup_kill(path, grace_seconds=TERM_GRACE_SECONDS)
            cgroup_remove(path)
