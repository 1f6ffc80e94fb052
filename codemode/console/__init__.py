"""The console in the browser: watch programs, calls and terminals live, take a terminal over,
answer approvals, look into the trash (``codemode mcp --http``, at ``/console``).

A front over the host: it watches the host's spans (`codemode.Host.watch`), reads sessions from
the front that holds them (`SessionSource`), and serves a plain page, one script and a vendored
xterm.js (``static/``). `docs/console/API.md` is its HTTP interface.
"""

from codemode.console._app import Console, ConsoleMode, SessionInfo, SessionSource
from codemode.console._guard import host_matcher

__all__ = ["Console", "ConsoleMode", "SessionInfo", "SessionSource", "host_matcher"]
