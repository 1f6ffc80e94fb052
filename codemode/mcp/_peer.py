"""A front process behind ``--processes`` takes connections from its router only.

Its Unix socket lies in the router's 0700 directory, but a confined command runs as the same
user and Landlock does not govern ``connect()`` to a named socket: a command that found the
path could reach the front beside the router (it would still need a token, and it would skip
the router's bounds on heads, bodies and slow clients). So each connection's peer is read
from the kernel (``SO_PEERCRED``, the connecting process as this process's pid namespace
sees it) and one from any process but the router is closed before a byte is read.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Any

from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

__all__ = ["peer_pid", "router_only_protocol"]

log = logging.getLogger("codemode.mcp")

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a connected Unix socket, or None when the
    kernel does not say (another family, a closed socket)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except OSError:
        return None
    pid, _uid, _gid = _UCRED.unpack(raw)
    return pid if pid > 0 else None


def router_only_protocol(router_pid: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (its ``auto`` choice), closing every connection whose peer is
    not ``router_pid`` as it is made; each closed one is logged with the peer's pid."""
    base: type[asyncio.Protocol] = import_from_string(HTTP_PROTOCOLS["auto"])

    class RouterOnly(base):  # type: ignore[valid-type,misc]  # a class chosen at run time
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            pid = None if sock is None else peer_pid(sock)
            if pid != router_pid:
                log.warning(
                    "codemode: refused a connection to this front process from pid %s (only its router, "
                    "pid %d, may connect)",
                    pid,
                    router_pid,
                )
                transport.close()

    return RouterOnly
