"""``codemode mcp --http --processes 2``: one port, two front processes on one state directory.
Sessions spread over both and each stays on the process that opened it (its store, its
background process); ``/healthz`` answers for both; the SDK's own client works through it; a
front process that dies is started again, and its sessions resume on a live one with their
secret; a DELETE is routed to the session's process. Loopback only, real processes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest

from tests.mcp.http_support import (
    auth,
    http_server,
    open_raw,
    rpc_answer,
    run_code_call,
    session,
    wait_until_gone,
)

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


async def _run(http: httpx2.AsyncClient, url: str, headers: dict[str, str], code: str) -> str:
    answer = rpc_answer(await http.post(url, headers=headers, json=run_code_call(code)))
    text: str = answer["result"]["structuredContent"]["text"]
    return text


def _fronts(router_pid: int) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(router_pid).children()
        if any(part.startswith("unix:") for part in child.cmdline())
    ]


async def test_two_front_processes_share_one_port_with_sessions_kept_on_their_process(tmp_path: Path) -> None:
    with http_server(tmp_path, "--processes", "2") as server, anyio.fail_after(120):
        fronts = _fronts(server.process.pid)
        assert len(fronts) == 2
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = [await open_raw(http, server.url) for _ in range(4)]
            for index, raw in enumerate(opened):
                await _run(http, server.url, raw.headers, f'await store.set("n", {index}); print("ok")')
            for index, raw in enumerate(opened):  # every later request reaches the same process
                got = await _run(http, server.url, raw.headers, 'print(await store.get("n"))')
                assert got.strip() == str(index)
            holders = [await _holder_of(server.state_dir, raw.headers["Mcp-Session-Id"]) for raw in opened]
            assert sorted(holders.count(front.pid) for front in fronts) == [2, 2], (holders, fronts)
            health = await http.get(server.url.removesuffix("/mcp") + "/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok", health.text
            deleted = await http.delete(server.url, headers=opened[0].headers)
            assert deleted.status_code == 200, deleted.text

        # The SDK's own client, through the router, with a background process and its completion.
        async with session(server.url) as client:
            started = await client.call_tool(
                "run_code",
                {
                    "code": 'const p = await tools.bash({command: "echo hi-there", run_in_background: true}); print(p.process_id)'
                },
            )
            process_id = started.structured_content["text"].strip() if started.structured_content else ""
            assert process_id.startswith("p_"), started
            with anyio.fail_after(30):
                while True:
                    told = await client.call_tool("run_code", {"code": 'print("tick")'})
                    text = told.structured_content["text"] if told.structured_content else ""
                    if process_id in text:
                        break
                    await anyio.sleep(0.2)


async def test_a_front_process_that_dies_is_started_again_and_its_sessions_resume(tmp_path: Path) -> None:
    with http_server(tmp_path, "--processes", "2") as server, anyio.fail_after(120):
        async with httpx2.AsyncClient(timeout=60) as http:
            first = await open_raw(http, server.url)
            await _run(http, server.url, first.headers, 'await store.set("k", "kept"); print("set")')
            holder = await _holder_of(server.state_dir, first.headers["Mcp-Session-Id"])
            os.kill(holder, signal.SIGKILL)
            # 503 (retry) while the router finds its process gone, then 404: the session ended.
            statuses: list[int] = []
            with anyio.fail_after(60):
                while not statuses or statuses[-1] != 404:
                    lost = await http.post(server.url, headers=first.headers, json=run_code_call("print(1)"))
                    statuses.append(lost.status_code)
                    if lost.status_code == 503:
                        assert lost.headers["retry-after"] == "1"
                        await anyio.sleep(0.2)
            assert set(statuses) <= {503, 404}, statuses
            with anyio.fail_after(60):
                while (
                    len(_fronts(server.process.pid)) < 2
                    or (await http.get(server.url.removesuffix("/mcp") + "/healthz")).status_code != 200
                ):
                    await anyio.sleep(0.2)
            moved = await open_raw(http, server.url, resume=first.resume_secret)
            kept = await _run(http, server.url, moved.headers, 'print(await store.get("k"))')
            assert kept.strip() == "kept"
            assert "exited" in server.stderr.read_text() and "starting it again" in server.stderr.read_text()


async def _holder_of(state_dir: Path, mcp_session: str) -> int:
    """The pid of the front process holding an MCP session (the state database says)."""
    import sqlite3

    with sqlite3.connect(state_dir / "state.db") as conn:
        rows = conn.execute("SELECT session_id, holder FROM session_holds WHERE ended_at IS NULL").fetchall()
    for session_id, holder in rows:
        if mcp_session in session_id:
            return int(str(holder).partition("t")[0])
    raise AssertionError(f"no holder for {mcp_session}: {json.dumps(rows)}")


def test_auth_header_is_required_through_the_router(tmp_path: Path) -> None:
    with http_server(tmp_path, "--processes", "2") as server:
        refused = httpx2.post(
            server.url, headers={**auth("wrong-token-000000000")}, json=run_code_call("print(1)")
        )
        assert refused.status_code == 401


async def test_front_processes_stop_when_their_router_is_killed(tmp_path: Path) -> None:
    with http_server(tmp_path, "--processes", "2") as server:
        fronts = _fronts(server.process.pid)
        assert len(fronts) == 2
        server.process.kill()
        server.process.wait()
        for front in fronts:
            assert await wait_until_gone(front.pid, 60), f"front process {front.pid} outlived its router"


async def test_a_pause_between_requests_keeps_the_session_on_its_process(tmp_path: Path) -> None:
    """The router keeps a connection to a front per client connection; a pause longer than a
    plain server's keep-alive (5 s) leaves the session where it was."""
    with http_server(tmp_path, "--processes", "2") as server, anyio.fail_after(60):
        async with httpx2.AsyncClient(timeout=60) as http:
            raw = await open_raw(http, server.url)
            await _run(http, server.url, raw.headers, 'await store.set("k", 1); print("set")')
            await anyio.sleep(6)
            assert (await _run(http, server.url, raw.headers, 'print(await store.get("k"))')).strip() == "1"


async def test_another_tenants_request_for_a_session_does_not_move_it(tmp_path: Path) -> None:
    tenants = tmp_path / "state" / "tenants"
    tenants.parent.mkdir(mode=0o700)
    tenants.write_text(f"alice {'a' * 32}\nmallory {'m' * 32}\n")
    with (
        http_server(
            tmp_path, "--processes", "2", "--tenants-file", str(tenants), env={"CODEMODE_MCP_TOKEN": ""}
        ) as server,
        anyio.fail_after(60),
    ):
        async with httpx2.AsyncClient(timeout=60) as http:
            alice = await open_raw(http, server.url, token="a" * 32)
            await _run(http, server.url, alice.headers, 'await store.set("k", "mine"); print("set")')
            stolen = {**alice.headers, "Authorization": f"Bearer {'m' * 32}"}
            refused = await http.post(server.url, headers=stolen, json=run_code_call("print(1)"))
            assert refused.status_code == 404
            assert (
                await _run(http, server.url, alice.headers, 'print(await store.get("k"))')
            ).strip() == "mine"
