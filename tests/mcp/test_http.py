"""The streamable HTTP front, driven by the MCP SDK's client against `codemode mcp --http`."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.host_support import alive
from tests.mcp.http_support import TOKEN, HttpServer, http_server, session, wait_until_gone

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with http_server(tmp_path) as running:
        yield running


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent)).strip()


async def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, headers={**_ACCEPT, **headers}, content=json.dumps(_INITIALIZE))


async def test_a_request_without_the_token_or_with_a_wrong_one_is_refused(server: HttpServer) -> None:
    with anyio.fail_after(60):
        missing = await _post(server.url, {})
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await _post(server.url, {"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401
        right = await _post(server.url, {"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200 and right.headers["mcp-session-id"]
        # The SDK client without the token fails to connect (it never gets a session).
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error types
            async with session(server.url, token="wrong"):
                pass


async def test_an_origin_other_than_a_loopback_one_is_refused(tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with http_server(tmp_path, "--allow-origin", "https://app.example.com") as server, anyio.fail_after(60):
        foreign = await _post(server.url, {**auth, "Origin": "http://evil.example"})
        assert foreign.status_code == 403 and "Origin" in foreign.text
        for origin in ("http://localhost:3000", "http://127.0.0.1:8080", "https://app.example.com"):
            allowed = await _post(server.url, {**auth, "Origin": origin})
            assert allowed.status_code == 200, origin
        rebound = await _post(server.url, {**auth, "Host": "evil.example:80"})  # DNS rebinding
        assert rebound.status_code == 421


async def test_two_concurrent_sessions_are_isolated(server: HttpServer) -> None:
    with anyio.fail_after(90):
        async with session(server.url) as a, session(server.url) as b:
            stored = await a.call_tool("run_code", {"code": 'await store.set("who", "a"); print("ok")'})
            assert not stored.is_error, _text(stored)
            started = await a.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
            assert started.structured_content is not None, _text(started)
            process_id = started.structured_content["process_id"]
            big = await a.call_tool("run_code", {"code": 'print("line\\n".repeat(40000))'})
            assert big.structured_content is not None and big.structured_content["refs"]
            ref = big.structured_content["refs"][0]

            # Concurrently: B sees none of A's store, processes or archived text.
            async def b_store() -> str:
                return _text(await b.call_tool("run_code", {"code": 'print(await store.get("who"))'}))

            async def a_store() -> str:
                return _text(await a.call_tool("run_code", {"code": 'print(await store.get("who"))'}))

            results: dict[str, str] = {}
            async with anyio.create_task_group() as group:

                async def put(name: str, fn: Any) -> None:
                    results[name] = await fn()

                group.start_soon(put, "a", a_store)
                group.start_soon(put, "b", b_store)
            assert results == {"a": "a", "b": "null"}
            listing = await b.call_tool("bash", {"action": "list"})
            assert listing.structured_content is not None and listing.structured_content["processes"] == []
            foreign = await b.call_tool("bash", {"action": "read", "process_id": process_id})
            assert foreign.is_error and process_id in _text(foreign)
            unread = await b.call_tool("read_archive", {"ref": ref})
            assert unread.is_error
            read = await a.call_tool("read_archive", {"ref": ref, "limit": 10})
            assert not read.is_error and "line" in _text(read)


async def test_a_sessions_processes_stop_when_it_ends_and_only_its_own(server: HttpServer) -> None:
    with anyio.fail_after(90):
        async with session(server.url) as b:
            async with session(server.url) as a:
                mine = await a.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
                kept = await a.call_tool(
                    "bash", {"command": "sleep 300", "run_in_background": True, "lifecycle": "managed"}
                )
                other = await b.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
                pids = [r.structured_content["pid"] for r in (mine, kept, other) if r.structured_content]
                assert len(pids) == 3 and all(alive(pid) for pid in pids)
            # A's client has sent DELETE: its lifecycle=session process stops; the managed one
            # and B's live on.
            assert await wait_until_gone(pids[0])
            assert alive(pids[1]) and alive(pids[2])
            stopped = await b.call_tool(
                "bash", {"action": "stop", "process_id": other.structured_content["process_id"]}
            )
            assert not stopped.is_error
        assert await wait_until_gone(pids[2])
        assert alive(pids[1])  # lifecycle=managed: outlives every session (stopped by the test)
        stop = await _codemode(server, "stop", kept.structured_content["process_id"])
        assert stop.returncode == 0, stop.stderr


async def _codemode(server: HttpServer, *args: str) -> subprocess.CompletedProcess[str]:
    """The codemode CLI on the server's workspace and state dir."""
    where = ["--workspace", str(server.workspace), "--state-dir", str(server.state_dir)]
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "codemode", *args, *where], capture_output=True, text=True
        )
    )


async def test_an_idle_session_expires_and_its_processes_stop(tmp_path: Path) -> None:
    with http_server(tmp_path, "--idle-timeout", "1") as server, anyio.fail_after(90):
        async with session(server.url, terminate_on_close=False) as a:  # never says goodbye
            started = await a.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
            assert started.structured_content is not None
            pid = started.structured_content["pid"]
        assert await wait_until_gone(pid)


async def test_long_calls_report_progress(server: HttpServer) -> None:
    events: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, message))

    with anyio.fail_after(90):
        async with session(server.url) as a:
            code = 'print("x".repeat(5000)); await sleep(2500); print("done")'
            ran = await a.call_tool("run_code", {"code": code}, progress_callback=on_progress)
            assert not ran.is_error and _text(ran).endswith("done")
            assert events, "no progress notification arrived"
            assert "5,001 characters printed, 0 tool calls" in (events[-1][1] or ""), events
            assert [p for p, _ in events] == sorted(p for p, _ in events) and events[0][0] >= 1
            events.clear()
            command = "head -c 100000 /dev/zero | tr '\\0' x; sleep 2.5"
            out = await a.call_tool("bash", {"command": command}, progress_callback=on_progress)
            assert not out.is_error
            assert any("100,000 bytes of command output" in (m or "") for _, m in events), events


async def test_a_start_up_problem_is_an_error_result_on_every_call(tmp_path: Path) -> None:
    # The state directory inside the workspace: codemode refuses to start (commands could read it).
    (tmp_path / "ws").mkdir()
    extra = ("--state-dir", str(tmp_path / "ws" / "state"))
    with anyio.fail_after(60):
        with http_server(tmp_path, *extra) as server:
            async with session(server.url) as a:
                listed = await a.list_tools()
                assert [t.name for t in listed.tools] == ["run_code"]
                for name in ("run_code", "bash"):
                    failed = await a.call_tool(name, {"code": "print(1)"})
                    assert failed.is_error
                    assert "codemode could not start" in _text(failed) and "state" in _text(failed)
        assert "codemode could not start" not in server.stderr.read_text()  # the reason, once
        assert server.stderr.read_text().count("codemode: error:") == 1


async def test_a_client_that_prefers_the_new_protocol_falls_back_to_a_session(server: HttpServer) -> None:
    """`mcp.Client` probes `server/discover` (protocol 2026-07-28, which has no sessions); the
    server answers with the handshake versions only, so the client opens an MCP session."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            assert client.session.protocol_version == "2025-11-25"
            await client.call_tool("run_code", {"code": 'await store.set("k", 1)'})
            again = await client.call_tool("run_code", {"code": 'print(await store.get("k"))'})
            assert _text(again) == "1"
        # A client pinned to the new protocol gets an error result that says what to do.
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(server.url, http_client=http), mode="2026-07-28") as pinned,
        ):
            refused = await pinned.call_tool("run_code", {"code": "print(1)"})
            assert refused.is_error and "mode='legacy'" in _text(refused)


async def test_two_server_processes_share_one_state_dir(tmp_path: Path) -> None:
    """What a load balancer with affinity on Mcp-Session-Id needs: each process keeps only
    connections, each session's state is in the shared state dir, sessions stay apart."""
    with (
        http_server(tmp_path, name="one") as one,
        http_server(tmp_path, name="two") as two,
        anyio.fail_after(90),
    ):
        assert one.state_dir == two.state_dir and one.url != two.url
        async with session(two.url) as b:
            async with session(one.url) as a:
                pids = []
                for client, who in ((a, "a"), (b, "b")):
                    await client.call_tool("run_code", {"code": f'await store.set("who", "{who}")'})
                    started = await client.call_tool(
                        "bash", {"command": "sleep 300", "run_in_background": True}
                    )
                    assert started.structured_content is not None
                    pids.append(started.structured_content["pid"])
                assert _text(await a.call_tool("run_code", {"code": 'print(await store.get("who"))'})) == "a"
                assert _text(await b.call_tool("run_code", {"code": 'print(await store.get("who"))'})) == "b"
                listed = await _codemode(one, "ps", "--all", "--json")  # both, from the shared dir
                sessions = {row["session_id"] for row in json.loads(listed.stdout)}
                assert len(sessions) == 2 and all(s.startswith("mcp-") for s in sessions)
            assert await wait_until_gone(pids[0])  # A ended on server one: only its process stops
            assert alive(pids[1])
        assert await wait_until_gone(pids[1])


async def test_stopping_the_server_ends_its_sessions(tmp_path: Path) -> None:
    with http_server(tmp_path) as server, anyio.fail_after(90):
        async with session(server.url, terminate_on_close=False) as a:
            started = await a.call_tool("bash", {"command": "sleep 300", "run_in_background": True})
            assert started.structured_content is not None
            pid = started.structured_content["pid"]
            server.process.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(lambda: server.process.wait(60))
        assert code == 0, server.stderr.read_text()
        assert await wait_until_gone(pid, 5)  # stopped before the server exited: no waiting
        assert "Traceback" not in server.stderr.read_text()


async def test_without_a_configured_token_one_is_generated_and_printed_once(tmp_path: Path) -> None:
    with http_server(tmp_path, env={"CODEMODE_MCP_TOKEN": ""}) as server, anyio.fail_after(60):
        found = re.findall(r"bearer token \(generated[^)]*\): (\S+)", server.stderr.read_text())
        assert len(found) == 1 and len(found[0]) >= 32 and found[0] != TOKEN
        async with session(server.url, token=found[0]) as a:
            assert _text(await a.call_tool("run_code", {"code": "print(6 * 7)"})) == "42"
        assert (await _post(server.url, {"Authorization": f"Bearer {TOKEN}"})).status_code == 401
        assert server.stderr.read_text().count(found[0]) == 1


async def test_over_capacity_a_request_is_answered_503_at_once_with_retry_after(tmp_path: Path) -> None:
    with http_server(tmp_path, "--max-requests", "2") as server, anyio.fail_after(90):
        async with httpx2.AsyncClient(timeout=60) as http:
            auth = {**_ACCEPT, "Authorization": f"Bearer {TOKEN}"}
            sessions = []
            for _ in range(3):
                opened = await http.post(server.url, headers=auth, content=json.dumps(_INITIALIZE))
                headers = {
                    **auth,
                    "Mcp-Session-Id": opened.headers["mcp-session-id"],
                    "MCP-Protocol-Version": "2025-11-25",
                }
                await http.post(
                    server.url,
                    headers=headers,
                    json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                )
                sessions.append(headers)
            gate = server.workspace / "go"

            def slow(name: str) -> dict[str, Any]:
                command = f"touch {name}; while [ ! -e {gate.name} ]; do sleep 0.05; done"
                code = f"await tools.bash({{command: {json.dumps(command)}}})"
                arguments = {"name": "run_code", "arguments": {"code": code}}
                return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": arguments}

            answers: dict[str, int] = {}

            async def call(name: str, headers: dict[str, str]) -> None:
                answers[name] = (await http.post(server.url, headers=headers, json=slow(name))).status_code

            async with anyio.create_task_group() as group:
                group.start_soon(call, "a", sessions[0])
                group.start_soon(call, "b", sessions[1])
                while not ((server.workspace / "a").exists() and (server.workspace / "b").exists()):
                    await anyio.sleep(0.02)  # both calls are in flight (their commands run)
                ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
                refused = await http.post(server.url, headers=sessions[2], json=ping)
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                assert "at capacity (2 requests in flight)" in refused.json()["error"]["message"]
                gate.touch()
            assert answers == {"a": 200, "b": 200}
            again = await http.post(
                server.url, headers=sessions[2], json={"jsonrpc": "2.0", "id": 10, "method": "ping"}
            )
            assert again.status_code == 200
        assert "at capacity (2 requests in flight): refused 1 with 503" in server.stderr.read_text()


async def test_healthz_answers_load_balancers_without_the_token(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "ws").mkdir()
    broken = ("--state-dir", str(tmp_path / "broken" / "ws" / "state"))  # refused: inside the workspace
    with anyio.fail_after(60), http_server(tmp_path) as server:
        health = server.url.removesuffix("/mcp") + "/healthz"
        async with httpx2.AsyncClient(timeout=30) as http:
            ok = await http.get(health)
            assert ok.status_code == 200 and ok.json() == {"status": "ok"}
            assert (await http.post(health)).status_code == 405
            with http_server(tmp_path / "broken", *broken, name="broken") as failed:
                down = await http.get(failed.url.removesuffix("/mcp") + "/healthz")
            assert down.status_code == 503 and down.json()["status"] == "unavailable"
            assert "could not start" in down.json()["reason"] and str(tmp_path) not in down.text
