"""Requests smuggled through ``--processes``' router: HTTP/1.1 with ambiguous framing (both a
Content-Length and a chunked Transfer-Encoding, two Content-Lengths) or a header section too
large is refused 400/431 by the router and the connection closed; what reaches a front process
is always one request framed by the router (its length its own), so a second request hidden in
a body never reaches one as a request of its own."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.mcp.http_support import TOKEN, http_server

pytestmark = pytest.mark.blackbox

_HIDDEN = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)


def _exchange(address: tuple[str, int], raw: bytes) -> bytes:
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 4\r\nContent-Length: 40\r\n",
        b"X-Big: " + b"a" * 70_000 + b"\r\nContent-Length: 4\r\n",
    ],
    ids=["length-and-chunked", "two-lengths", "huge-header"],
)
def test_ambiguous_or_oversized_requests_are_refused_by_the_router(tmp_path: Path, head: bytes) -> None:
    with http_server(tmp_path, "--processes", "2") as server:
        where = urlsplit(server.url)
        assert where.hostname is not None and where.port is not None
        raw = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n0\r\n\r\n" + _HIDDEN
        answer = _exchange((where.hostname, where.port), raw)
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 4"), answer[:300]
        assert answer.count(b"HTTP/1.1 ") == 1, answer[:600]  # the hidden request got no answer
