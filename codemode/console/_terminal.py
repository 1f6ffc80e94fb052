"""A background process's terminal, live: its log as server-sent events.

The supervisor writes the process's PTY output to its log in the archive; this reads it from
the archive (`Archive.read`: the redacted view of the stored bytes, terminal escapes kept, so
xterm.js shows what the process drew) from the offset the page asks, sends each new page as an
``output`` event, and once the process has ended and everything is sent, an ``exit`` event.

Its writer is another process, so the log is looked at `_POLL_SECONDS` apart: a ``stat`` of the
log file on the loop (it lies in the state directory, where no command writes: no FIFO or
symlink can be planted there), and only when its size or time changed a read, off the loop (a
database lookup, a read and redaction). 50 quiet terminals then cost 500 stats a second, not
500 thread hops (bench/bench_console.py measured the difference).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread

from codemode.errors import ToolError
from codemode.host import Host
from codemode.state import ArchivePage

__all__ = ["terminal_events"]

_POLL_SECONDS = 0.1  # between looks at a live process's log
_STATE_SECONDS = 1.0  # between looks at whether it still runs (a database read)
_PAGE_BYTES = 64 * 1024


async def terminal_events(
    host: Host, session: str, process_id: str, row: Any, offset: int
) -> AsyncIterator[dict[str, str]]:
    """The events of one process's terminal from ``offset`` (see the module's docstring)."""
    ref = row["log_ref"]
    live = row["state"] == "running"
    exit_code = row["exit_code"]
    checked = anyio.current_time()
    path = await anyio.to_thread.run_sync(host.processes.log_file, session, process_id)
    seen: tuple[int, int] | None = None  # the log file's (size, mtime) when it was read to its end
    # (a record without a log has nothing to show: a log is made when the process starts)
    while ref is not None:
        stamp = _stamp(path)
        if stamp is None or stamp != seen or not live:  # something new (or it ended: read to the end)
            try:
                page = await anyio.to_thread.run_sync(_read, host, ref, offset, session)
            except ToolError as exc:
                yield {"event": "error", "data": json.dumps({"error": str(exc)})}
                return
            if page.data:
                text = page.data.decode("utf-8", "replace")
                yield {"event": "output", "data": json.dumps({"data": text, "next_offset": page.next_offset})}
            offset = page.next_offset
            if not page.eof:
                continue
            seen = stamp
            if not live:
                break
        await anyio.sleep(_POLL_SECONDS)
        if anyio.current_time() - checked >= _STATE_SECONDS:
            checked = anyio.current_time()
            fresh = await anyio.to_thread.run_sync(host.processes.process_row, session, process_id)
            live, exit_code = fresh["state"] == "running", fresh["exit_code"]
    yield {"event": "exit", "data": json.dumps({"exit_code": exit_code})}


def _stamp(path: str) -> tuple[int, int] | None:
    """The log file's size and modification time, or None (gone: the log was finished)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_size, info.st_mtime_ns)


def _read(host: Host, ref: str, offset: int, session: str) -> ArchivePage:
    return host.archive.read(ref, offset, _PAGE_BYTES, session_id=session)
