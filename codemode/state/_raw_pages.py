"""Pages of a raw log (stored unredacted: a command's output), redacted as they are read."""

from __future__ import annotations

import os
import re
import threading

from codemode.state._redact import Redactor, context_start
from codemode.state._stream import StreamRedactor

__all__ = ["RawLogPages"]

_PAGE_CONTEXT = 64 * 1024  # bytes before (and after) a raw log's page read as its redaction context
_KNOWN_SCAN = 8 * 1024 * 1024  # bytes before a page scanned (once per log) for values found by context
_KNOWN_LOGS = 32  # raw logs whose found values are remembered


class RawLogPages:
    """Redacts the pages read of raw logs, with their context, remembering per log the values
    found by their context (for an `Archive`: one per state directory).

    Args:
        redactor: The rules.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._known_lock = threading.Lock()
        self._known_logs: dict[str, tuple[int, StreamRedactor]] = {}  # ref: (scanned to, its scan)

    def page(
        self, fd: int, ref: str, data: bytes, start: int, retained_from: int, run_end: int
    ) -> tuple[bytes, int]:
        """Redact a page of a raw log, ending it where no secret can be split.

        A page ends at a line end unless its run of kept bytes ends first (the bytes after a
        dropped range cannot continue a line before it). It is redacted with its context: from
        the start of the line it begins in (or of a private key block open there), to the end
        of the line it ends in, and knowing the values found by their context in the 8 MiB
        before it (``password = 'X'`` earlier, ``X`` bare in the page).
        """
        end = start + len(data)
        if end < run_end:
            if b"PRIVATE KEY" in data:
                # Extend an open private key block to its END line (bounded, within the run).
                extra = os.pread(fd, min(_PAGE_CONTEXT, run_end - end), end - retained_from)
                marker = extra.find(b"PRIVATE KEY-----")
                if marker >= 0:
                    line_end = extra.find(b"\n", marker)
                    stop = len(extra) if line_end < 0 else line_end + 1
                    data += extra[:stop]
                    end += stop
            if end < run_end:
                cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
                if cut > 0:
                    end -= len(data) - cut
                    data = data[:cut]
        before_from = max(retained_from, start - _PAGE_CONTEXT)
        before = (
            os.pread(fd, start - before_from, before_from - retained_from) if start > before_from else b""
        )
        before = before[context_start(before) :]
        after = b""
        if end < run_end and data[-1:] not in (b"\n", b"\r"):  # a line longer than the page
            after = os.pread(fd, min(_PAGE_CONTEXT, run_end - end), end - retained_from)
            after_end = re.search(rb"[\r\n]", after)
            after = after[: after_end.end()] if after_end else after
        known = self._known_before(ref, fd, retained_from, start - len(before))
        if not before and not after:
            return self._redactor.redact_bytes(data, known), end
        window = before + data + after
        return self._redactor.redact_range(window, len(before), len(before) + len(data), known), end

    def _known_before(self, ref: str, fd: int, retained_from: int, offset: int) -> dict[bytes, bytes]:
        """The secret values found by their context (``password = 'X'``) in a raw log before
        ``offset``: scanned from up to 8 MiB before it, once per log and Archive (a scan goes on
        from where the last ended, so reading a log page by page scans it once; a jump further
        than 8 MiB starts again there, keeping what was found). Costs a redaction pass over
        those bytes, at most 8 MiB per read (~40 ms); holds up to _KNOWN_LOGS logs' values."""
        with self._known_lock:
            scan = self._known_logs.pop(ref, None)
            if scan is None or offset - scan[0] > _KNOWN_SCAN:
                stream = StreamRedactor(self._redactor)
                if scan is not None:
                    stream.known.update(scan[1].known)
                scan = (max(retained_from, offset - _KNOWN_SCAN, scan[0] if scan else 0), stream)
            position, stream = scan
            position = max(position, retained_from)
            while position < offset:
                chunk = os.pread(fd, min(1024 * 1024, offset - position), position - retained_from)
                if not chunk:
                    break
                stream.feed(chunk)
                position += len(chunk)
            self._known_logs[ref] = (max(position, scan[0]), stream)
            while len(self._known_logs) > _KNOWN_LOGS:
                del self._known_logs[next(iter(self._known_logs))]
            return dict(stream.known)
