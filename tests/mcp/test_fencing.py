"""A front cut off from the shared database (a real PostgreSQL cluster, reached by front A
through a Unix-socket forwarder the test cuts and mends), with beats of half a second:

- past four beats without one recorded, A answers every request 503 with ``Retry-After``;
- past six, front B ends A's session, and the client resumes it on B with its secret (its store
  there);
- when A reaches the database again it finds the session gone from its holds: it closes it
  there (its ``lifecycle: session`` process stopped), answers its old MCP session id 404 saying
  what happened, and leaves B's hold of it alone: the session goes on at B.

Loopback and Unix sockets only, real processes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import psutil
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from tests.mcp.http_support import INITIALIZE, auth, http_server, open_raw, rpc_answer, run_code_call
from tests.postgres_support import Cluster

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

_SOCKET = ".s.PGSQL.5432"


class _Forwarder:
    """The cluster's socket, forwarded from a directory of the test's by an event loop of its own
    (the servers' start blocks the test's): `cut` closes every connection through it and
    refuses new ones (the socket file is gone); `mend` listens again."""

    def __init__(self, target: Path, directory: Path, portal: BlockingPortal) -> None:
        self._target = target
        self._path = directory / _SOCKET
        directory.mkdir()
        self._portal = portal
        self._scope: anyio.CancelScope | None = None

    async def _pump(self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in source:
                await sink.send(chunk)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.send_eof()

    async def _serve(self, client: anyio.abc.ByteStream) -> None:
        async with (
            client,
            await anyio.connect_unix(self._target) as upstream,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._pump, client, upstream)
            tg.start_soon(self._pump, upstream, client)

    async def _listen(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            listener = await anyio.create_unix_listener(self._path)
            task_status.started()
            async with listener:
                await listener.serve(self._serve)

    def mend(self) -> None:
        self._portal.start_task(self._listen)

    def cut(self) -> None:
        assert self._scope is not None
        self._portal.call(self._scope.cancel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)


@contextlib.contextmanager
def _forwarded(cluster: Cluster, directory: Path) -> Iterator[_Forwarder]:
    with start_blocking_portal() as portal:
        forwarder = _Forwarder(cluster.socket_dir / _SOCKET, directory, portal)
        forwarder.mend()
        try:
            yield forwarder
        finally:
            forwarder.cut()


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == ["sleep", marker]:
            found.append(proc)
    return found


async def test_a_front_cut_off_stops_serving_and_gives_its_session_up_to_the_one_that_took_it(
    tmp_path: Path, postgres_cluster: Cluster, database_url: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    beats = ("--beat-seconds", "0.5")  # fenced after 2 s, ended by the other front after 3 s
    with _forwarded(postgres_cluster, tmp_path / "pg") as forwarder:
        through = database_url.replace(f"host={postgres_cluster.socket_dir}", f"host={tmp_path / 'pg'}")
        with (
            http_server(tmp_path / "a", *beats, name="a", env={"CODEMODE_DATABASE_URL": through}) as first,
            http_server(
                tmp_path / "b", *beats, name="b", env={"CODEMODE_DATABASE_URL": database_url}
            ) as second,
        ):
            async with httpx2.AsyncClient(timeout=60) as http:
                with anyio.fail_after(150):
                    await _drill(
                        http, forwarder, first.url, second.url, first.process.pid, second.process.pid
                    )
        stderr = first.stderr.read_text()
        assert "stops serving its sessions" in stderr and "reached the shared database again" in stderr, (
            stderr[-3000:]
        )


async def _drill(
    http: httpx2.AsyncClient, forwarder: _Forwarder, a: str, b: str, a_pid: int, b_pid: int
) -> None:
    marker = f"{3000 + os.getpid() % 1000}"  # a sleep of our own, found by its argument
    opened = await open_raw(http, a)
    code = (
        'await store.set("k", 7); '
        f'const p = await tools.bash({{command: "sleep {marker}", run_in_background: true, lifecycle: "session"}}); '
        "print(p.process_id)"
    )
    started = rpc_answer(await http.post(a, headers=opened.headers, json=run_code_call(code)))
    assert started["result"]["structuredContent"]["text"].startswith("p_"), started
    while not _sleepers(marker):
        await anyio.sleep(0.1)

    forwarder.cut()
    while True:  # fenced: every request of its session answered 503, told to retry
        fenced = await http.post(a, headers=opened.headers, json=run_code_call("print(1)"))
        if fenced.status_code == 503:
            break
        await anyio.sleep(0.2)
    assert fenced.headers["retry-after"] == "5", fenced.headers
    assert "has not reached the shared state database" in fenced.json()["error"]["message"], fenced.text

    while True:  # the other front ended A's session: it resumes there with its secret
        resumed = await http.post(
            b, headers={**auth(), "Codemode-Resume": opened.resume_secret}, json=INITIALIZE
        )
        if resumed.status_code == 200:
            break
        assert resumed.status_code == 409, resumed.text  # still held by A until six beats pass
        await anyio.sleep(0.3)
    on_b = {**opened.headers, "Mcp-Session-Id": resumed.headers["mcp-session-id"]}
    await http.post(b, headers=on_b, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    got = rpc_answer(await http.post(b, headers=on_b, json=run_code_call('print(await store.get("k"))')))
    assert got["result"]["structuredContent"]["text"].strip() == "7", got

    forwarder.mend()
    while True:  # A reached the database again and found the session gone from its holds
        gone = await http.post(a, headers=opened.headers, json=run_code_call("print(1)"))
        if gone.status_code == 404:
            break
        await anyio.sleep(0.2)
    assert "another server ended the session or took it over" in gone.json()["error"]["message"], gone.text
    while _sleepers(marker):  # its lifecycle=session process stopped where it ran
        await anyio.sleep(0.1)
    # B's hold was left alone: the session goes on there.
    again = rpc_answer(await http.post(b, headers=on_b, json=run_code_call('print(await store.get("k"))')))
    assert again["result"]["structuredContent"]["text"].strip() == "7", again
    assert a_pid != b_pid
