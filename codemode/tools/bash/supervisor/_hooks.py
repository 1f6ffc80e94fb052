"""What a supervisor does with output besides logging it: keyword reports and the output's tail
(a background run), events (a Monitor watcher)."""

from __future__ import annotations

import json
import time
from typing import Any

from codemode.tools.bash.supervisor._copier import Hooks, Stopper
from codemode.tools.bash.supervisor._spec import Spec

# Keyword reports: once output has been quiet this long after a line with a keyword (waiting
# at most _REPORT_MAX_WAIT), at most one per _REPORT_EVERY; with the latest _REPORT_BYTES.
_REPORT_QUIET = 2.0
_REPORT_MAX_WAIT = 10.0
_REPORT_EVERY = 30.0
_REPORT_BYTES = 8 * 1024
# A completion keeps this much of the output's end.
_TAIL_BYTES = 31 * 1024
# A watcher's event: lines are cut to this many characters, an event holds at most this many
# lines (the rest start the next event).
_EVENT_LINE_CHARS = 4000
_EVENT_MAX_LINES = 200


class _Lines:
    """Splits a byte stream into complete lines (text, without the line end)."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[str]:
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if len(self._partial) > 64 * 1024:  # a line that never ends: take it as it is
            chunks.append(self._partial)
            self._partial = b""
        return [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]

    def rest(self) -> list[str]:
        rest, self._partial = self._partial, b""
        return [rest.decode("utf-8", "replace").rstrip("\r")] if rest.strip() else []


class _Tail:
    """The last ``size`` bytes of a stream."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()

    def feed(self, data: bytes) -> None:
        self.data += data
        if len(self.data) > 2 * self.size:
            del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return bytes(self.data[-self.size :]).decode("utf-8", "replace")


class RunHooks(Hooks):
    """A background run: keyword reports, an optional lifetime, the tail for its completion."""

    def __init__(self, records: Any, conn: Any, spec: Spec, stopper: Stopper) -> None:
        self.records = records
        self.conn = conn
        self.process_id = spec["process_id"]
        self.command = spec["command"]
        self.keywords = [k.lower() for k in spec.get("report_on") or ()]
        timeout = spec.get("timeout_seconds")
        self.stop_at = None if timeout is None else time.monotonic() + float(timeout)
        self.timeout = timeout
        self.stopper = stopper
        self.lines = _Lines()
        self.tail = _Tail(_TAIL_BYTES)
        self.report_tail = _Tail(_REPORT_BYTES)
        self.hit: tuple[str, str] | None = None  # (keyword, line) of the first line not yet reported
        self.hit_at = 0.0
        self.last_output = 0.0
        self.last_report = -_REPORT_EVERY

    def output(self, fd: int, data: bytes, now: float) -> None:
        self.tail.feed(data)
        self.last_output = now
        if not self.keywords:
            return
        self.report_tail.feed(data)
        if self.hit is None:
            for line in self.lines.feed(data):
                low = line.lower()
                found = next((k for k in self.keywords if k in low), None)
                if found is not None:
                    self.hit = (found, line.strip())
                    self.hit_at = now
                    break
        else:
            self.lines.feed(data)

    def _report_at(self) -> float | None:
        if self.hit is None:
            return None
        ready = min(self.last_output + _REPORT_QUIET, self.hit_at + _REPORT_MAX_WAIT)
        return max(ready, self.last_report + _REPORT_EVERY)

    def deadline(self) -> float | None:
        limits = [t for t in (self._report_at(), self.stop_at if self.stopper.why is None else None) if t]
        return min(limits) if limits else None

    def tick(self, now: float) -> None:
        if self.stop_at is not None and now >= self.stop_at and self.stopper.why is None:
            self.stopper.stop(f"; it reached its timeout_seconds ({self.timeout:g} s) and was stopped", now)
        report_at = self._report_at()
        if report_at is not None and now >= report_at and self.hit is not None:
            keyword, line = self.hit
            self.hit = None
            self.last_report = now
            short = self.records.short_command(self.command)
            shown = self.records.short_command(line, 200)
            text = (
                f"Background process {self.process_id} (`{short}`) printed {keyword!r} and is still running: "
                f'"{shown}". Read its output with bash({{action: "read", process_id: "{self.process_id}"}}).'
            )
            self.records.add_note(
                self.conn, self.process_id, "report", text,
                {"keyword": keyword, "line": line, "output": self.report_tail.text()},
            )  # fmt: skip


class WatchHooks(Hooks):
    """A Monitor watcher: complete stdout lines become events (coalesced, rate limited);
    stderr only goes to the log; its limits end it."""

    def __init__(self, records: Any, conn: Any, spec: Spec, stdout_fd: int, stopper: Stopper) -> None:
        self.records = records
        self.conn = conn
        self.process_id = spec["process_id"]
        options = spec["watch"]
        self.options = options
        now = time.monotonic()
        self.name = records.watcher_name(self.process_id, json.dumps(options))
        self.stdout_fd = stdout_fd
        self.stopper = stopper
        self.lines = _Lines()
        self.coalesce = options["coalesce_ms"] / 1000
        self.stop_at = now + options["timeout_seconds"]
        self.idle = options.get("idle_timeout_seconds")
        self.max_events = options.get("max_events")
        self.per_minute = options["max_events_per_minute"]
        self.last_line = now
        self.batch: list[str] = []
        self.batch_at: float | None = None
        self.last_emit = -self.coalesce
        self.sent: list[float] = []  # when recent events went out (the rate limit's window)
        self.events = 0
        self.suppressed = 0
        self.suppressed_total = 0
        self.after_limit = 0

    def output(self, fd: int, data: bytes, now: float) -> None:
        if fd != self.stdout_fd:
            return  # stderr: the log only
        lines = self.lines.feed(data)
        if lines:
            self.last_line = now
            self._add(lines, now)

    def _add(self, lines: list[str], now: float) -> None:
        for line in lines:
            self.batch.append(line if len(line) <= _EVENT_LINE_CHARS else line[:_EVENT_LINE_CHARS] + "…")
            if self.batch_at is None:
                # A line after a quiet window goes out at once (with the rest of its read);
                # lines within the window after an event wait for its end and go together.
                self.batch_at = max(now, self.last_emit + self.coalesce)
            if len(self.batch) >= _EVENT_MAX_LINES:
                self._emit(now)

    def _emit(self, now: float) -> None:
        lines, self.batch, self.batch_at = self.batch, [], None
        if not lines:
            return
        if self.max_events is not None and self.events >= self.max_events:
            self.after_limit += len(lines)
            return
        self.sent = [t for t in self.sent if t > now - 60]
        if len(self.sent) >= self.per_minute:
            self.suppressed += len(lines)
            self.suppressed_total += len(lines)
            return
        self.sent.append(now)
        self.last_emit = now
        shown = " | ".join(lines)
        if len(shown) > 1000:
            shown = shown[:1000] + f"… ({len(lines)} lines: read them all with monitor_events)"
        what = self.name + (f", {len(lines)} lines" if len(lines) > 1 else "")
        note = ""
        if self.suppressed:
            note = f" ({self.suppressed} earlier lines were suppressed by the rate limit of {self.per_minute} events a minute)"
        data = {"lines": lines, "suppressed": self.suppressed}
        self.suppressed = 0
        self.records.add_note(self.conn, self.process_id, "event", f"{what}: {shown}{note}", data)
        self.events += 1
        if self.max_events is not None and self.events >= self.max_events:
            self.stopper.stop(f"; it reached max_events ({self.max_events}) and was stopped", now)

    def deadline(self) -> float | None:
        limits = [self.batch_at]
        if self.stopper.why is None:
            limits.append(self.stop_at)
            if self.idle is not None:
                limits.append(self.last_line + self.idle)
        found = [t for t in limits if t is not None]
        return min(found) if found else None

    def tick(self, now: float) -> None:
        if self.batch_at is not None and now >= self.batch_at:
            self._emit(now)
        if self.stopper.why is None:
            if now >= self.stop_at:
                self.stopper.stop(
                    f"; it reached its timeout_seconds ({self.options['timeout_seconds']:g} s) and was stopped",
                    now,
                )
            elif self.idle is not None and now >= self.last_line + self.idle:
                self.stopper.stop(
                    f"; it printed no line for idle_timeout_seconds ({self.idle:g} s) and was stopped", now
                )

    def closed(self, now: float) -> None:
        self._add(self.lines.rest(), now)
        self._emit(now)

    def end_note(self) -> str:
        note = self.stopper.why or ""
        if self.suppressed_total:
            note += f"; the rate limit suppressed {self.suppressed_total} lines in all"
        if self.after_limit:
            note += f"; {self.after_limit} lines printed after max_events made no event"
        return note
