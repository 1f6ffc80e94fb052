"""The Monitor extension: watchers whose complete stdout lines are events for the session.

A watcher is a command run like a background command (confined through the same launch
path, in the session) under a supervisor of its own, which turns each complete stdout line
into an event (lines within the coalescing window make one event; a rate limit suppresses
and counts the rest); stderr only goes to its log. Events are persisted and delivered once
per session, like completions; the watcher's own end is its last event.

* ``monitor_extension(manager)``: the ``monitor`` `Extension` (tools ``monitor_start``,
  ``monitor_list``, ``monitor_stop``, ``monitor_events``, ``monitor_wait``, and guidance).
"""

from codemode.tools.monitor._tools import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MonitorStartArgs,
    monitor_extension,
)

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "MAX_TIMEOUT_SECONDS", "MonitorStartArgs", "monitor_extension"]
