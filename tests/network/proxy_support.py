"""Helpers for the proxy tests: a loopback HTTP server that counts its connections, a command
stand-in handed to the proxy the way the launcher hands one over, and a recording resolver and
connector (tests send traffic to loopback only)."""

from __future__ import annotations

import http.server
import ipaddress
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio.abc

from codemode.network import Channel, NetworkProxy, check_entries
from codemode.network._addresses import Address
from codemode.network._proxy import connect


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class CountingServer(http.server.ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that counts the connections it accepted."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self._lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, object]:
        accepted = super().get_request()
        with self._lock:
            self.connections += 1
        return accepted

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def counting_server() -> Iterator[CountingServer]:
    server = CountingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Recorder:
    """A resolver from a table and a connector that records every attempt and connects to
    loopback only (anything else fails as if unreachable)."""

    table: dict[str, list[str]] = field(default_factory=dict)
    looked_up: list[str] = field(default_factory=list)
    attempts: list[tuple[str, int]] = field(default_factory=list)

    async def resolve(self, name: str, port: int) -> Sequence[Address]:
        self.looked_up.append(name)
        if name not in self.table:
            raise OSError(-2, "Name or service not known")
        return [ipaddress.ip_address(a) for a in self.table[name]]

    async def connect(self, address: Address, port: int) -> anyio.abc.ByteStream:
        self.attempts.append((str(address), port))
        if not address.is_loopback:
            raise OSError(f"tests reach loopback only, not {address}")
        return await connect(address, port)

    def proxy(self, max_connections: int = 64) -> NetworkProxy:
        return NetworkProxy(resolver=self.resolve, connector=self.connect, max_connections=max_connections)


@dataclass
class Attached:
    """A stand-in command attached to a proxy: its listener's port and its channel."""

    port: int
    channel: Channel
    command: subprocess.Popen[bytes]

    def exit(self) -> None:
        assert self.command.stdin is not None
        self.command.stdin.close()
        self.command.wait(timeout=30)


@contextmanager
def attached(proxy: NetworkProxy, allow: Sequence[str]) -> Iterator[Attached]:
    """What the launcher does for a command (a listener and a pidfd sent over the channel), with
    a listener on the host's loopback and a ``cat`` standing for the command (it exits when its
    stdin closes)."""
    host_end, command_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    channel = proxy.attach(host_end, check_entries(allow))
    listener = socket.create_server(("127.0.0.1", 0), backlog=256)
    command = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    pidfd = os.pidfd_open(command.pid)
    try:
        socket.send_fds(command_end, [b"n"], [listener.fileno(), pidfd])
        port = listener.getsockname()[1]
    finally:
        listener.close()
        os.close(pidfd)
        command_end.close()
    stand_in = Attached(port, channel, command)
    try:
        yield stand_in
    finally:
        if stand_in.command.returncode is None:
            stand_in.exit()


def ask(port: int, request: bytes, then: bytes = b"") -> bytes:
    """Send ``request`` to the proxy at ``port`` (and ``then`` after its first answer line), read
    to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(request)
        data = b""
        if then:
            while b"\r\n\r\n" not in data:
                chunk = client.recv(65536)
                if not chunk:
                    return data
                data += chunk
            client.sendall(then)
        while chunk := client.recv(65536):
            data += chunk
        return data
