"""Reaping and upkeep: start-up reconcile, log finishing and pinning, expiry of old records,
foreground commands of dead hosts ended; promoted runs reaped; what a session's finished runs
left behind ended with it."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.errors import ToolError
from codemode.sandbox import cgroup_kill, cgroup_remove
from codemode.state import Archive, ProcessRecord
from codemode.state import process_records as _records
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


class Reaping:
    """The :class:`ProcessManager`'s upkeep (a mixin: the manager holds the state)."""

    _adopted: dict[str, Running]
    _archive: Archive
    _leftovers: dict[str, set[str]]
    _lock: threading.Lock

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...
        def _stop(self, record: ProcessRecord, note: str = "") -> StoppedAnswer: ...

    def maintain(self) -> dict[str, int]:
        """Start-up upkeep: reconcile records, finish and pin logs, expire old records (also
        safe later). Run it before the archive's own upkeep (`State.maintain`).

        Terminal records older than 30 days are removed with their logs unless a completion
        is still undelivered; logs of undelivered completions are pinned so the archive's
        compaction and expiry leave them alone.

        Foreground commands left running by a host that died are ended too (found by the
        marker variable, which names their host's pid and start time).

        Returns:
            Counts: ``lost`` (records reconciled), ``expired`` (records removed), ``orphans``
            (foreground commands of dead hosts ended).
        """
        counts = {"lost": 0, "expired": 0, "orphans": 0}
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

    async def close_session(self, session_id: str) -> None:
        """Stop the session's ``lifecycle: session`` processes."""
        with self._db() as conn:
            live = _records.live_records(conn, session_id)
        with anyio.CancelScope(shield=True):
            for record in live:
                if record.lifecycle == "session":
                    with contextlib.suppress(ToolError):
                        await anyio.to_thread.run_sync(self._stop, record)
            await anyio.to_thread.run_sync(self._end_leftovers, session_id)

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
