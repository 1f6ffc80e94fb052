"""A process other than the router connecting to a front process's Unix socket behind
``codemode mcp --processes``: a confined command runs as the same user, and Landlock does not
govern ``connect()`` to a named socket, so one that finds the path reaches the socket. The
front closes every connection whose peer (``SO_PEERCRED``) is not its router before reading a
byte: a stranger holding the right token gets no answer, the router's clients are served."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest

from tests.mcp.http_support import TOKEN, http_server, open_raw, rpc_answer, run_code_call

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

_HEALTH = f"GET /healthz HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()


def _front_sockets(router_pid: int) -> list[str]:
    paths = []
    for child in psutil.Process(router_pid).children():
        paths += [part.removeprefix("unix:") for part in child.cmdline() if part.startswith("unix:")]
    return paths


def _ask(path: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        chunks = []
        try:  # the front may close before the request is even sent
            sock.sendall(_HEALTH)
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
    return b"".join(chunks)


async def test_a_front_socket_answers_its_router_only(tmp_path: Path) -> None:
    with http_server(tmp_path, "--processes", "2") as server, anyio.fail_after(120):
        paths = _front_sockets(server.process.pid)
        assert len(paths) == 2, paths
        for path in paths:  # this test process is a stranger to the front, token or not
            assert _ask(path) == b"", path
        async with httpx2.AsyncClient(timeout=60) as http:  # through the router: served
            health = await http.get(server.url.removesuffix("/mcp") + "/healthz")
            assert health.status_code == 200, health.text

            # The attack itself: a confined command, started through the router, dials a front.
            raw = await open_raw(http, server.url)
            script = (
                "import socket, sys\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                "s.settimeout(20)\n"
                "s.connect(sys.argv[1])\n"
                "data = b''\n"
                "try:\n"
                f"    s.sendall({_HEALTH!r})\n"
                "    while chunk := s.recv(65536):\n"
                "        data += chunk\n"
                "except (BrokenPipeError, ConnectionResetError):\n"
                "    pass\n"
                "print('got', len(data), data[:12])\n"
            )
            (server.workspace / "dial.py").write_text(script)
            code = f"const r = await tools.bash({{command: {json.dumps(f'python3 dial.py {paths[0]}')}}}); print(r.exit_code, r.stdout.excerpt, r.stderr.excerpt)"
            answer = rpc_answer(await http.post(server.url, headers=raw.headers, json=run_code_call(code)))
            text = answer["result"]["structuredContent"]["text"]
            assert "got 0 b''" in text, text
    log = server.stderr.read_text()
    assert "refused a connection to this front process" in log, log[-2000:]
