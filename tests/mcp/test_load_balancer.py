"""The README's load-balancer setup, for real: two `codemode mcp --http` processes on one state
dir behind HAProxy with affinity on Mcp-Session-Id (skipped where haproxy is not installed)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.host_support import alive
from tests.mcp.http_support import HttpServer, http_server, session, wait_until_gone

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.blackbox,
    pytest.mark.skipif(
        shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)"
    ),
]

# The README's backend section, with this test's addresses.
_CONFIG = """\
defaults
    mode http
    timeout connect 5s
    timeout client  1h
    timeout server  1h

frontend mcp
    bind 127.0.0.1:{front}
    default_backend codemode

backend codemode
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    option redispatch
    retries 2
    stick-table type string len 64 size 1m expire 1h
    stick match req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
    server one 127.0.0.1:{one} check inter 1s fall 2 rise 1
    server two 127.0.0.1:{two} check inter 1s fall 2 rise 1
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@contextmanager
def _haproxy(tmp_path: Path, one: HttpServer, two: HttpServer) -> Iterator[str]:
    """HAProxy in front of the two servers, with the README's backend section: its /mcp URL,
    once it listens."""
    front = _free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(_CONFIG.format(front=front, one=_port(one.url), two=_port(two.url)))
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:  # until haproxy listens
            try:
                socket.create_connection(("127.0.0.1", front), timeout=1).close()
                break
            except OSError:
                assert proxy.poll() is None, proxy.stderr.read() if proxy.stderr else ""
                assert time.monotonic() < deadline, "haproxy did not listen within 30 s"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{front}/mcp"
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        if proxy.stderr is not None:
            proxy.stderr.close()


async def test_sessions_stick_to_their_server_behind_haproxy(tmp_path: Path) -> None:
    with (
        http_server(tmp_path, name="one") as one,
        http_server(tmp_path, name="two") as two,
        _haproxy(tmp_path, one, two) as url,
    ):
        pids: dict[str, int] = {}
        with anyio.fail_after(120):

            async def client(name: str) -> None:
                # Round robin spreads new sessions over both servers; each later request
                # of a session must reach the one that holds it (else: 404, no session).
                async with session(url) as s:
                    await s.call_tool("run_code", {"code": f'await store.set("me", "{name}")'})
                    started = await s.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
                    assert started.structured_content is not None, started
                    pids[name] = started.structured_content["pid"]
                    for _ in range(5):
                        got = await s.call_tool("run_code", {"code": 'print(await store.get("me"))'})
                        assert not got.is_error and got.content[0].text.strip() == name  # type: ignore[union-attr]
                    listing = await s.call_tool("bash", {"action": "list"})
                    assert listing.structured_content is not None
                    assert len(listing.structured_content["processes"]) == 1

            async with anyio.create_task_group() as group:
                for name in ("a", "b", "c", "d"):
                    group.start_soon(client, name)
            # Each session's DELETE reached its own server: all their processes stopped.
            for pid in pids.values():
                assert await wait_until_gone(pid), pid
            assert not any(alive(pid) for pid in pids.values())


async def test_new_sessions_go_to_the_live_server_when_one_died(tmp_path: Path) -> None:
    """The issue's case: one backend killed, and half the new sessions failed. With the health
    check and redispatch of the README's section, every new session lands on the live one."""
    with (
        http_server(tmp_path, name="one") as one,
        http_server(tmp_path, name="two") as two,
        _haproxy(tmp_path, one, two) as url,
    ):
        one.process.kill()
        one.process.wait(timeout=30)
        with anyio.fail_after(120):
            for n in range(10):
                async with session(url) as s:
                    got = await s.call_tool("run_code", {"code": f"print({n})"})
                    assert not got.is_error and got.content[0].text.strip() == str(n)  # type: ignore[union-attr]
