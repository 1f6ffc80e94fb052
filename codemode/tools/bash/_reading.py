"""Reading and waiting: a process's output paged from its log (paced while it grows), a wait for
its exit or a matching line (a watcher's: event), and the exit seen (its completion delivered,
a verification command's summary)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from codemode.errors import ErrorCode, ToolError
from codemode.state import Archive, ProcessRecord, Redactor
from codemode.state import process_records as _records
from codemode.tools._terminal import clean_terminal_text, terminal_view
from codemode.tools.bash._answers import ReadAnswer, WaitAnswer
from codemode.tools.bash._background import PTY_VIEW
from codemode.tools.bash._foreground import (
    _classify,
)
from codemode.tools.bash._limits import DEFAULT_READ_BYTES, DEFAULT_WAIT_MS

if TYPE_CHECKING:
    from codemode.tools._verification import Verification, VerificationData
    from codemode.tools.bash._completions import Notification


_POLL_SECONDS = 0.005


_LIVENESS_SECONDS = 0.25


_RECORD_END_WAIT_SECONDS = 5.0


# A waiting read returns once output has been quiet this long (never on a burst's first byte),
# or once this much new output is there (of ``max_bytes``): a fast log must not outrun the
# reader past its cap, which keeps only its head and its tail.
QUIET_SECONDS = 0.2


_PACED_BYTES = 256 * 1024


# How much of a log's end the verification summary is read from.
_VERIFY_TAIL_BYTES = 64 * 1024


# A watcher's events come back at most this many at a time.
MAX_EVENTS_PER_READ = 200


def _compile(pattern: str) -> re.Pattern[str]:
    """The ``until`` pattern as a regular expression.

    Raises:
        ToolError: It is not a valid one.
    """
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ToolError(
            f"until.pattern {pattern!r} is not a valid regular expression: {exc}; escape special "
            "characters (e.g. \\. for a dot)",
            code=ErrorCode.BAD_PATTERN,
        ) from None


def _summary(verification: Verification) -> str | None:
    """The line a completion gets: the failure summary, else the runner's own summary."""
    from codemode.tools._verification import failure_summary

    failed = failure_summary(verification)
    if failed:
        return failed
    if verification.summary_line:
        return f"{verification.tool}: {verification.summary_line}"
    return None


def wait_text(data: WaitAnswer) -> str:
    """The text of a ``wait`` result."""
    pid = data["process_id"]
    cursor = "after" if data.get("kind") == "watcher" else "offset_bytes"
    where = f"next {cursor} {data['next_offset']}"
    code = "unknown" if data["exit_code"] is None else data["exit_code"]
    if data["reason"] == "pattern":
        text = f'[{pid}: a line matched /{data["pattern"]}/ after {data["waited_ms"]} ms: "{data["line"]}"; {where}]'
    elif data["reason"] == "exit":
        text = f"[{pid} {data['state']}, exit code {code} (waited {data['waited_ms']} ms); {where}]"
    else:
        what = f"no new line matched /{data['pattern']}/" if data.get("pattern") else "it did not exit"
        text = f"[{pid}: timed out after {data['waited_ms']} ms: {what}; still {data['state']}; {where}]"
    verification = data.get("verification")
    if verification and verification.get("summary_line"):
        text += f"\n{verification['tool']}: {verification['summary_line']}"
    return text


def _read_text(data: ReadAnswer) -> str:
    lines = [data["output"].rstrip("\n")] if data["output"].strip() else []
    if data.get("note"):
        lines.append(data["note"])
    more = data["next_offset"] < data["total_bytes"]
    if data["exited"]:
        code = "unknown" if data["exit_code"] is None else data["exit_code"]
        lines.append(f"[process {data['process_id']} {data['state']}, exit code {code}]")
        verification = data.get("verification")
        if verification and verification.get("summary_line"):
            lines.append(f"{verification['tool']}: {verification['summary_line']}")
    elif not lines:
        lines.append(f"[no new output; still running; next offset_bytes {data['next_offset']}]")
    if more:
        lines.append(f"[more output: read on with offset_bytes {data['next_offset']}]")
    return "\n".join(lines)


class Reading:
    """The :class:`ProcessManager`'s reads and waits (a mixin: the manager holds the state)."""

    _archive: Archive
    _environ: dict[str, str]
    _redactor: Redactor

    if TYPE_CHECKING:

        def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...
        def _ended(self, record: ProcessRecord) -> bool: ...
        def _get(self, session_id: str, process_id: str) -> ProcessRecord: ...
        def _network_note(self, process_id: str) -> str | None: ...
        def _notification(self, row: sqlite3.Row) -> Notification: ...
        def _supervisor_alive(self, record: ProcessRecord) -> bool: ...

    async def read(
        self,
        session_id: str,
        process_id: str,
        offset: int = 0,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
    ) -> ReadAnswer:
        """Read a process's output from ``offset``, waiting up to ``wait_ms`` for new output.

        A waiting read returns once new output has been quiet for `QUIET_SECONDS`, or there is
        ``max_bytes`` of it (at most 256 KiB), or the process ended, or the wait is over: never on the first byte
        of a burst. A read that shows the exit counts as the completion's delivery.

        Returns:
            ``output`` (cleaned, redacted), ``offset`` (where it starts), ``next_offset``,
            ``total_bytes``, ``eof`` (nothing more on disk now), ``exited``, ``exit_code``,
            ``state`` and, when the offset was compacted away, ``note``; after the exit of a
            verification command, ``verification``. All output has been read once ``exited``
            and ``eof`` are both true.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The offset is past the end of the log.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        limit = max_bytes or DEFAULT_READ_BYTES
        if wait_ms and record.live:
            record = await self._wait_output(record, offset, limit, time.monotonic() + wait_ms / 1000)
        elif record.live and self._ended(record):
            record = await anyio.to_thread.run_sync(self._await_end, record)
        data = await anyio.to_thread.run_sync(self._read_page, record, offset, limit)
        if not record.live:
            await anyio.to_thread.run_sync(self._seen_exit, record, data)
        return data

    async def _wait_output(
        self, record: ProcessRecord, offset: int, limit: int, deadline: float
    ) -> ProcessRecord:
        """Wait for output past ``offset`` to arrive and go quiet (see `read`); the record as
        it is afterwards."""
        session_id, process_id = record.session_id, record.process_id
        next_check = time.monotonic() + _LIVENESS_SECONDS
        last_size = offset
        grew_at: float | None = None
        while (now := time.monotonic()) < deadline:
            if now >= next_check:
                # A supervisor that died leaves no signal: look at it now and then.
                next_check = now + _LIVENESS_SECONDS
                if not self._supervisor_alive(record):
                    return await anyio.to_thread.run_sync(self._get, session_id, process_id)
            if self._ended(record):
                return await anyio.to_thread.run_sync(self._await_end, record)
            try:
                size = os.stat(record.log_path).st_size
            except OSError:
                size = 0
            if size > last_size:
                last_size, grew_at = size, now
                if size - offset >= min(limit, _PACED_BYTES):
                    break
            elif grew_at is not None and now - grew_at >= QUIET_SECONDS:
                break
            await anyio.sleep(_POLL_SECONDS)
        return await anyio.to_thread.run_sync(self._get, session_id, process_id)

    def _seen_exit(self, record: ProcessRecord, data: ReadAnswer | WaitAnswer) -> None:
        """The session has seen this ended process's exit (a read or a wait showed it): its
        completion counts as delivered; a verification command's result
        carries its summary."""
        with self._db() as conn:
            _records.ack_process(conn, record.process_id, "completion")
        if record.log_ref is not None:
            # Not finished here: a reader may be paging through it (upkeep finishes it).
            with contextlib.suppress(ToolError):
                self._archive.pin(record.log_ref, False)
        verification = self._verification(record)
        if verification is not None:
            data["verification"] = verification

    def _verification(self, record: ProcessRecord) -> VerificationData | None:
        """The verification of an ended verification command (a test, build, lint or type
        check), read from the end of its log once and kept in its record; its completion's
        line gets the summary. None for other commands."""
        if record.verification is not None:
            kept: VerificationData | None = json.loads(record.verification)
            return kept
        classification = _classify(record.command) if record.kind != "watcher" else None
        result: VerificationData | None = None
        if classification is not None and record.log_ref is not None:
            try:
                info = self._archive.entry_info(record.log_ref)
                total = (
                    int(str(info["total_bytes"] or 0))
                    if info.get("finished")
                    else os.stat(record.log_path).st_size
                )
                page = self._archive.read(
                    record.log_ref, max(0, total - _VERIFY_TAIL_BYTES), _VERIFY_TAIL_BYTES,
                    session_id=record.session_id,
                )  # fmt: skip
                text = clean_terminal_text(page.data)
            except (ToolError, OSError):
                text = ""
            from codemode.tools._verification import parse_verification

            verification = parse_verification(classification, text, record.exit_code)
            result = verification.to_dict()
            summary = _summary(verification)
            with self._db() as conn:
                if summary:
                    row = conn.execute(
                        "SELECT id, text FROM notifications WHERE process_id = ? AND kind = 'completion'",
                        (record.process_id,),
                    ).fetchone()
                    if row is not None and summary not in row["text"]:
                        marker = ". Read its output"
                        head, found, tail = row["text"].partition(marker)
                        text_with = (
                            f"{head} — {summary}{found}{tail}" if found else f"{row['text']} — {summary}"
                        )
                        conn.execute("UPDATE notifications SET text = ? WHERE id = ?", (text_with, row["id"]))
        with self._db() as conn:
            _records.update(conn, record.process_id, verification=json.dumps(result))
        return result

    async def wait(
        self,
        session_id: str,
        process_id: str,
        until: str | dict[str, str] = "exit",
        timeout_ms: int = DEFAULT_WAIT_MS,
        offset: int = 0,
    ) -> WaitAnswer:
        """Wait until a process exits, or a new line of its output (from ``offset``) matches
        ``until["pattern"]`` (a regular expression), or ``timeout_ms`` passes. For a watcher,
        its events are the lines (``offset`` is the event number to wait after).

        Returns:
            ``reason`` (``exit``, ``pattern`` or ``timeout``), ``line`` (the matching line),
            ``next_offset`` (where to go on from: after the matching line, else the end of what
            was looked at; a watcher's: the event number), ``exited``, ``exit_code``, ``state``,
            ``waited_ms``; after the exit of a verification command, ``verification``.

        Raises:
            ProcessNotFound: No such process in this session.
            ToolError: The pattern is not a valid regular expression.
        """
        record = await anyio.to_thread.run_sync(self._get, session_id, process_id)
        pattern = _compile(until["pattern"]) if isinstance(until, dict) else None
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        if record.kind == "watcher":
            data = await self._wait_events(record, pattern, offset, deadline)
        else:
            data = await self._wait_log(record, pattern, offset, deadline)
        data["waited_ms"] = int((time.monotonic() - started) * 1000)
        if isinstance(until, dict):
            data["pattern"] = until["pattern"]
        return data

    async def _wait_log(
        self, record: ProcessRecord, pattern: re.Pattern[str] | None, offset: int, deadline: float
    ) -> WaitAnswer:
        position = offset
        next_check = time.monotonic() + _LIVENESS_SECONDS
        while True:
            ended = not record.live or self._ended(record)
            if ended and record.live:
                record = await anyio.to_thread.run_sync(self._await_end, record)
            if pattern is not None:
                found, position = await anyio.to_thread.run_sync(
                    self._match_log, record, pattern, position, not record.live
                )
                if found is not None:
                    line, line_end = found
                    return self._wait_result(record, "pattern", line, line_end)
            if not record.live:
                size = await anyio.to_thread.run_sync(self._log_size, record)
                result = self._wait_result(record, "exit", None, max(size, position))
                await anyio.to_thread.run_sync(self._seen_exit, record, result)
                return result
            now = time.monotonic()
            if now >= deadline:
                if pattern is None:
                    position = await anyio.to_thread.run_sync(self._log_size, record)
                return self._wait_result(record, "timeout", None, position)
            if now >= next_check:
                next_check = now + _LIVENESS_SECONDS
                if not self._supervisor_alive(record):
                    record = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
            await anyio.sleep(_POLL_SECONDS)

    def _log_size(self, record: ProcessRecord) -> int:
        try:
            return os.stat(record.log_path).st_size
        except OSError:
            return 0

    def _match_log(
        self, record: ProcessRecord, pattern: re.Pattern[str], position: int, ended: bool
    ) -> tuple[tuple[str, int] | None, int]:
        """The first complete line from ``position`` that matches (its text and the offset
        after it), and how far complete lines were looked at. Once ``ended``, a last line
        without its line end counts too."""
        if record.log_ref is None or self._log_size(record) <= position:
            return None, position
        page_bytes = 1 << 16
        while True:
            page = self._archive.read(record.log_ref, position, page_bytes, session_id=record.session_id)
            data, start = page.data, page.offset
            if not data:
                return None, start
            final = ended and page.next_offset >= page.total_bytes
            last_end = data.rfind(b"\n") + 1
            if final or (last_end == 0 and len(data) >= page_bytes):
                chunk = data  # the last line, or a line longer than a page: as it is
            elif last_end == 0:
                return None, start  # a line not yet complete
            else:
                chunk = data[:last_end]
            pieces = chunk.split(b"\n")
            if pieces[-1] == b"":
                pieces.pop()
            cursor = start
            for raw in pieces:
                line_end = min(cursor + len(raw) + 1, start + len(chunk))
                text = self._redactor.redact(clean_terminal_text(raw)).rstrip("\r")
                if text.strip() and pattern.search(text):
                    return (text, line_end), line_end
                cursor = line_end
            position = start + len(chunk)
            if position >= page.total_bytes or len(data) < page_bytes:
                return None, position

    def _wait_result(
        self, record: ProcessRecord, reason: str, line: str | None, next_offset: int
    ) -> WaitAnswer:
        return {
            "process_id": record.process_id,
            "kind": record.kind,
            "reason": reason,
            "line": line,
            "next_offset": next_offset,
            "exited": not record.live,
            "exit_code": record.exit_code,
            "state": record.state,
        }

    async def _wait_events(
        self, record: ProcessRecord, pattern: re.Pattern[str] | None, after: int, deadline: float
    ) -> WaitAnswer:
        cursor = after
        while True:
            rows = await anyio.to_thread.run_sync(
                self._event_rows, record.process_id, cursor, MAX_EVENTS_PER_READ
            )
            for row in rows:
                cursor = row["seq"]
                note = self._notification(row)
                lines = (note.data or {}).get("lines") or [note.text]
                final = bool((note.data or {}).get("final"))
                matched = next((ln for ln in lines if pattern is not None and pattern.search(ln)), None)
                if matched is not None or final:
                    fresh = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
                    with self._db() as conn:  # the model sees this event (the others stay pending)
                        _records.ack(conn, record.session_id, [row["id"]])
                    reason = "pattern" if matched is not None else "exit"
                    return self._wait_result(
                        fresh, reason, matched if matched is not None else note.text, cursor
                    )
            if time.monotonic() >= deadline:
                fresh = await anyio.to_thread.run_sync(self._get, record.session_id, record.process_id)
                return self._wait_result(fresh, "timeout", None, cursor)
            await anyio.sleep(_POLL_SECONDS)

    def _event_rows(self, process_id: str, after: int, limit: int) -> list[sqlite3.Row]:
        with self._db() as conn:
            return _records.events(conn, process_id, after, limit)

    def _await_end(self, record: ProcessRecord) -> ProcessRecord:
        deadline = time.monotonic() + _RECORD_END_WAIT_SECONDS
        while True:
            fresh = self._get(record.session_id, record.process_id)
            if not fresh.live or time.monotonic() > deadline:
                return fresh
            time.sleep(_POLL_SECONDS)

    def _read_page(self, record: ProcessRecord, offset: int, limit: int) -> ReadAnswer:
        assert record.log_ref is not None
        page = self._archive.read(record.log_ref, offset, limit, session_id=record.session_id)
        # A background command wrote to its PTY; a promoted one to pipes.
        view = PTY_VIEW if record.kind == "background" else terminal_view(self._environ)
        output = self._redactor.redact(clean_terminal_text(page.data, view))
        data: ReadAnswer = {
            "process_id": record.process_id,
            "output": output,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "total_bytes": page.total_bytes,
            "eof": page.eof,
            "exited": not record.live,
            "exit_code": record.exit_code,
            "state": record.state,
        }
        if page.dropped is not None:
            start, end = page.dropped
            why = (
                "older output was compacted away"
                if end <= page.retained_from
                else "the log outgrew its cap, which keeps its head and its tail"
            )
            data["note"] = (
                f"bytes {start}-{end} of the log are not kept ({why}); reading from the next kept byte, {end}"
            )
        network = self._network_note(record.process_id) if not record.live else None
        if network is not None:
            data["note"] = f"{data['note']}\n{network}" if data.get("note") else network
        return data
