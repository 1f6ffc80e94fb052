"""The HTTP front's listening socket: what the connections it accepts are set to."""

from __future__ import annotations

import asyncio
import socket

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
