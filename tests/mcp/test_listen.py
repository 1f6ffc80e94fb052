"""The HTTP front's listening socket: what the connections it accepts are set to."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import anyio
import pytest

from codemode.mcp._http import _listen

pytestmark = pytest.mark.anyio


async def test_accepted_connections_send_at_once_without_waiting_for_an_ack() -> None:
    # With Nagle's algorithm on, the second write of an answer (its body after its headers) waits
    # for the client's delayed ACK: 40 ms on every request that follows another at once. asyncio
    # turns it off only where the listening socket says its protocol is TCP.
    listener = _listen("127.0.0.1", 0)
    nodelay: list[int] = []
    accepted = anyio.Event()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock: socket.socket = transport.get_extra_info("socket")
            nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            accepted.set()
            transport.close()

    server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
    try:
        with anyio.fail_after(10):
            async with await anyio.connect_tcp("127.0.0.1", listener.getsockname()[1]):
                await accepted.wait()
    finally:
        server.close()
        await server.wait_closed()
    assert nodelay == [1]


def test_the_front_raises_its_open_files_limit_to_the_hard_limit() -> None:
    # Each connection holds a file, each engine worker kept for a session two: a soft limit of
    # 1,024 would end a front of 1,000 sessions in EMFILE.
    probe = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from codemode.mcp._http import _raise_open_files_limit, _OPEN_FILES\n"
        "_raise_open_files_limit()\n"
        "now, _ = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "print(now == (min(hard, _OPEN_FILES) if hard != resource.RLIM_INFINITY else _OPEN_FILES) or now)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True", done.stdout + done.stderr
