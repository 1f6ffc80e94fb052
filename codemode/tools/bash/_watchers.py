"""Monitor watchers: background processes (kind ``watcher``) whose supervisor turns stdout lines
into this session's events; started, described, listed and their events read."""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.errors import ErrorCode, ProcessNotFound, ToolError
from codemode.state import Archive, ProcessRecord
from codemode.state import process_records as _records
from codemode.tools.bash._answers import EventData, EventsAnswer, WatcherData
from codemode.tools.bash._background import start_background
from codemode.tools.bash._foreground import (
    RunSpec,
)
from codemode.tools.bash._reading import _POLL_SECONDS, MAX_EVENTS_PER_READ
from codemode.tools.bash._table import _iso, _not_found

if TYPE_CHECKING:
    from codemode.tools.bash._completions import Notification


class Watchers:
    """The :class:`ProcessManager`'s Monitor watchers (a mixin: the manager holds the state)."""

    _archive: Archive
    _max_watchers: int
    _start_lock: threading.Lock

    if TYPE_CHECKING:

        def _check_cap(self, session_id: str, kind: str = "background") -> bool: ...
        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _event_rows(self, process_id: str, after: int, limit: int) -> list[sqlite3.Row]: ...
        def _get(self, session_id: str, process_id: str) -> ProcessRecord: ...
        def _notification(self, row: sqlite3.Row) -> Notification: ...
        def _reconcile(self, record: ProcessRecord) -> ProcessRecord: ...

    def start_watcher(self, spec: RunSpec, options: Mapping[str, object]) -> WatcherData:
        """Start a Monitor watcher: ``spec.command`` under a supervisor, its complete stdout
        lines this session's events (blocking).

        Raises:
            ToolError: The session has its cap of live watchers, or it could not start.
        """
        process_id = f"w_{secrets.token_hex(6)}"
        with self._start_lock:
            if not self._check_cap(spec.session_id, "watcher"):
                raise ToolError(
                    f"this session already has {self._max_watchers} watchers running (the cap); stop one "
                    "with monitor_stop({watcher_id})",
                    {"cap": self._max_watchers},
                    code=ErrorCode.WATCHER_CAP,
                )
            start_background(
                spec,
                process_id=process_id,
                archive=self._archive,
                db=self._db,
                kind="watcher",
                settings=options,
            )
        return self.watcher(spec.session_id, process_id)

    def watcher(self, session_id: str, watcher_id: str) -> WatcherData:
        """One watcher, described (state, options, event count).

        Raises:
            ProcessNotFound: No such watcher in this session.
        """
        record = self._get_watcher(session_id, watcher_id)
        with self._db() as conn:
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM notifications WHERE process_id = ? AND kind = 'event'", (watcher_id,)
            ).fetchone()
        options = json.loads(record.options) if record.options else {}
        return {
            "watcher_id": record.process_id,
            "description": options.get("description"),
            "command": record.command,
            "state": record.state,
            "started": _iso(record.started_at),
            "ended": _iso(record.ended_at),
            "exit_code": record.exit_code,
            "events": int(count),
            "options": {k: v for k, v in options.items() if k != "description"},
            "log_ref": record.log_ref,
        }

    def _get_watcher(self, session_id: str, watcher_id: str) -> ProcessRecord:
        try:
            record = self._get(session_id, watcher_id)
        except ProcessNotFound:
            record = None
        if record is None or record.kind != "watcher":
            raise _not_found(watcher_id, "watcher")
        return record

    def list_watchers(self, session_id: str) -> list[WatcherData]:
        """The session's watchers, oldest first."""
        with self._db() as conn:
            records = [r for r in _records.for_session(conn, session_id) if r.kind == "watcher"]
        for record in records:
            self._reconcile(record)
        return [self.watcher(session_id, r.process_id) for r in records]

    async def events(
        self,
        session_id: str,
        watcher_id: str,
        after: int = 0,
        limit: int = MAX_EVENTS_PER_READ,
        wait_ms: int = 0,
    ) -> EventsAnswer:
        """A watcher's events numbered above ``after``, waiting up to ``wait_ms`` for one; the
        events returned count as delivered.

        Returns:
            ``events`` (``seq``, ``text``, ``lines``, ``suppressed``, ``final``, ``at``),
            ``next_after`` (pass as ``after`` next time), ``state``, ``exit_code``.

        Raises:
            ProcessNotFound: No such watcher in this session.
        """
        record = await anyio.to_thread.run_sync(self._get_watcher, session_id, watcher_id)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            rows = await anyio.to_thread.run_sync(self._event_rows, watcher_id, after, limit)
            if rows or time.monotonic() >= deadline:
                break
            if not record.live:
                record = await anyio.to_thread.run_sync(self._get, session_id, watcher_id)
                if not record.live:
                    rows = await anyio.to_thread.run_sync(self._event_rows, watcher_id, after, limit)
                    break
            await anyio.sleep(_POLL_SECONDS)
        events: list[EventData] = []
        for row in rows:
            note = self._notification(row)
            extra = note.data or {}
            events.append(
                {
                    "seq": note.seq,
                    "text": note.text,
                    "lines": extra.get("lines", []),
                    "suppressed": extra.get("suppressed", 0),
                    "final": bool(extra.get("final")),
                    "at": _iso(row["created_at"]),
                }
            )
        next_after = events[-1]["seq"] if events else after
        if events:
            with self._db() as conn:
                _records.ack_process(conn, watcher_id, "event", next_after)
        fresh = await anyio.to_thread.run_sync(self._get, session_id, watcher_id)
        return {
            "watcher_id": watcher_id,
            "events": events,
            "next_after": next_after,
            "state": fresh.state,
            "exit_code": fresh.exit_code,
        }
