"""Opening the host for a server front, and what a front serves when that fails."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from codemode.errors import CodemodeError
from codemode.host import Host

__all__ = ["HostSource", "open_host"]

HostSource = Host | Callable[[], Host]


@asynccontextmanager
async def open_host(source: HostSource) -> AsyncIterator[Host | str]:
    """Yield the opened host, or the problem that kept it from starting (a state directory
    inside the workspace, an unreadable configuration, ...), also written once to stderr.

    A front serves the problem as an error result on every call (`create_failed_server`), so
    the client shows the reason instead of a closed connection.
    """
    try:
        host = source() if callable(source) else source
        await host.open()
    except (CodemodeError, OSError) as exc:
        problem = str(exc)
        sys.stderr.write(f"codemode: error: {problem} (every MCP call answers with this until it is fixed)\n")
        sys.stderr.flush()
        yield problem
        return
    try:
        yield host
    finally:
        await host.aclose()
