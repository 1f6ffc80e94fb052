"""The console's HTTP interface on a real `codemode mcp --http`, driven by an MCP client beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest

from tests.console.console_support import KEY_HEADER, base_of, console, post, same_origin, until, watching
from tests.mcp.http_support import TOKEN, HttpServer, http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent)).strip()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with http_server(tmp_path) as running:
        yield running


async def _only_session(web: httpx2.AsyncClient) -> str:
    listed = (await web.get("/console/api/sessions")).json()
    assert len(listed) == 1, listed
    return str(listed[0]["session_id"])


async def test_login_takes_the_token_and_gives_a_strict_httponly_cookie(server: HttpServer) -> None:
    async with httpx2.AsyncClient(base_url=base_of(server)) as web:
        assert (await web.get("/console/api/me")).status_code == 401
        wrong = await web.post("/console/login", json={"token": "not-it"}, headers=same_origin(server))
        assert wrong.status_code == 401 and "token" in wrong.json()["error"]
        right = await web.post("/console/login", json={"token": TOKEN}, headers=same_origin(server))
        assert right.status_code == 200
        cookie = right.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
        assert TOKEN not in right.text and TOKEN not in right.headers["set-cookie"]
        key = {KEY_HEADER: right.json()["key"]}
        me = await web.get("/console/api/me", headers=key)
        assert me.json() == {"mode": "on", "tenant": "codemode", "approvals": False}
        await web.post("/console/logout", json={}, headers={**same_origin(server), **key})
        assert (await web.get("/console/api/me", headers=key)).status_code == 401


async def test_a_programs_calls_stream_live_side_by_side_with_their_commands_nested(
    server: HttpServer,
) -> None:
    program = (
        "const [a, b] = await Promise.all([tools.bash({command: 'sleep 0.5; echo A'}),"
        " tools.bash({command: 'sleep 0.5; echo B'})]);\nprint(a.stdout.excerpt.trim() + b.stdout.excerpt.trim());"
    )
    async with console(server) as web, watching(web) as log, session(server.url) as client:
        result = await client.call_tool("run_code", {"code": program})
        assert _text(result) == "AB"
        await log.wait_for(lambda ev: any(n == "run" and d["status"] == "ok" for n, d in ev))
        session_id = await _only_session(web)
        calls = [d["call"] for n, d in log.events if n == "call"]
        runs = (await web.get(f"/console/api/sessions/{session_id}/runs")).json()
        detail = (await web.get(f"/console/api/sessions/{session_id}/runs/{runs[0]['run_id']}")).json()
    started = [c for c in calls if c["status"] == "running"]
    assert [c["name"] for c in started if c["kind"] == "tool"] == ["bash", "bash"]  # live, as each began
    tools = [c for c in detail["calls"] if c["kind"] == "tool"]
    commands = [c for c in detail["calls"] if c["kind"] == "command"]
    assert len(tools) == 2 and len(commands) == 2
    first, second = sorted(tools, key=lambda c: c["started"])
    assert second["started"] < first["started"] + first["duration_ms"] / 1000  # they overlapped
    assert {c["parent"] for c in commands} == {t["id"] for t in tools}  # each command under its call
    assert all(c["status"] == "ok" and c["parent"] is None for c in tools)
    assert "sleep 0.5; echo A" in tools[0]["args"] + tools[1]["args"]
    assert detail["source"] == program and detail["output"].strip() == "AB"
    assert detail["status"] == "ok" and detail["error"] is None
    assert detail["budget"]["max_output_tokens"] > 0 and detail["usage"]["tool_calls"] == 2


async def test_an_error_shows_its_line_and_a_long_output_reads_back_in_pages(server: HttpServer) -> None:
    program = "for (let i = 0; i < 3000; i++) print('line ' + i);\nthrow new Error('boom');"
    async with console(server) as web, session(server.url) as client:
        await client.call_tool("run_code", {"code": f'// @run_code: {{"max_output_tokens": 200}}\n{program}'})
        session_id = await _only_session(web)
        (run,) = (await web.get(f"/console/api/sessions/{session_id}/runs")).json()
        detail = (await web.get(f"/console/api/sessions/{session_id}/runs/{run['run_id']}")).json()
        assert (
            detail["status"] == "error"
            and detail["error"]["message"] == "boom"
            and detail["error"]["line"] == 3
        )
        ref = detail["archive_ref"]
        assert detail["truncated"] and ref
        text, offset = "", 0
        while True:
            page = (
                await web.get(f"/console/api/sessions/{session_id}/archive/{ref}", params={"offset": offset})
            ).json()
            text += page["text"]
            offset = page["next_offset"]
            if page["eof"]:
                break
        assert "line 0\n" in text and "line 2999\n" in text
        other = await web.get(f"/console/api/sessions/mcp-someone-else/archive/{ref}")
        assert other.status_code == 404  # an archive is read only as its own session's


async def test_a_person_takes_a_terminal_over_and_the_model_waits_its_turn(server: HttpServer) -> None:
    async with console(server) as web, session(server.url) as client:
        started = await client.call_tool("bash", {"command": "cat", "run_in_background": True})
        assert not started.is_error
        session_id = await _only_session(web)
        (proc,) = (await web.get(f"/console/api/sessions/{session_id}/processes")).json()
        pid, at = proc["process_id"], f"/console/api/sessions/{session_id}/processes/{proc['process_id']}"
        early = await post(web, server, f"{at}/input", {"text": "x\n"})
        assert early.status_code == 409 and "take the terminal over" in early.json()["error"]
        assert (await post(web, server, f"{at}/takeover", {"on": True})).json() == {"taken_over": True}
        async with watching(web, f"{at}/stream?offset=0") as terminal:
            assert (
                await post(web, server, f"{at}/input", {"text": "typed by a person\n"})
            ).status_code == 200
            await terminal.wait_for(
                lambda ev: "typed by a person" in "".join(d["data"] for n, d in ev if n == "output")
            )
        refused = await client.call_tool("bash", {"action": "write", "process_id": pid, "input": "model\n"})
        assert (
            refused.is_error
            and "taken over" in _text(refused)
            and "taken_over" in str(refused.structured_content)
        )
        listed = (await web.get(f"/console/api/sessions/{session_id}/processes")).json()
        assert listed[0]["taken_over"] is True
        await post(web, server, f"{at}/takeover", {"on": False})
        again = await client.call_tool("bash", {"action": "write", "process_id": pid, "input": "model\n"})
        assert not again.is_error, _text(again)
        stopped = await post(web, server, f"{at}/stop", {})
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
        actions = (await web.get("/console/api/actions")).json()
        assert [a["action"] for a in actions] == ["stop", "handback", "input", "takeover"]
        assert actions[2]["detail"] == "typed by a person\n" and all(a["target"] == pid for a in actions)
        async with watching(web, f"{at}/stream?offset=0") as ended:  # a stopped process's terminal
            await ended.wait_for(lambda ev: any(n == "exit" for n, _ in ev))
        assert "model" in "".join(d["data"] for n, d in ended.events if n == "output")


async def test_completions_of_background_commands_reach_the_sessions_feed(server: HttpServer) -> None:
    async with console(server) as web, session(server.url) as client:
        await client.call_tool("bash", {"command": "echo finished", "run_in_background": True})
        session_id = await _only_session(web)

        async def completion_shown() -> bool:
            notices = (await web.get(f"/console/api/sessions/{session_id}/notices")).json()
            return any(n["kind"] == "completion" and "echo finished" in n["text"] for n in notices)

        await until(completion_shown)


async def test_approvals_are_answered_at_the_console_and_the_reason_reaches_the_model(tmp_path: Path) -> None:
    program = (
        "const r = await Promise.allSettled([tools.write_file({path: 'a.txt', content: 'a'}),"
        " tools.write_file({path: 'b.txt', content: 'b'})]);"
        "print(r.map(x => x.status === 'fulfilled' ? 'ok' : x.reason.message).join(' | '));"
    )
    with http_server(tmp_path, "--approvals", "console") as server:
        async with console(server) as web, watching(web) as log, session(server.url) as client:
            outcome: list[types.CallToolResult] = []

            async def run() -> None:
                outcome.append(await client.call_tool("run_code", {"code": program}))

            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await log.wait_for(
                    lambda ev: sum(n == "approval" and d["state"] == "pending" for n, d in ev) == 2
                )
                pending = (await web.get("/console/api/approvals")).json()
                by_path = {p["paths"][0]: p for p in pending}
                assert set(by_path) == {"a.txt", "b.txt"} and all(p["can_remember"] for p in pending)
                assert all(p["kind"] == "tool" and p["tool"] == "write_file" for p in pending)
                allow = await post(
                    web, server, f"/console/api/approvals/{by_path['a.txt']['id']}", {"decision": "allow"}
                )
                assert allow.status_code == 200
                deny = {"decision": "deny", "reason": "not b, write it to c.txt"}
                assert (
                    await post(web, server, f"/console/api/approvals/{by_path['b.txt']['id']}", deny)
                ).status_code == 200
                twice = await post(web, server, f"/console/api/approvals/{by_path['b.txt']['id']}", deny)
                assert twice.status_code == 404  # answered already
            # a direct call was approved by its client (as with elicitation): not asked again
            direct = await client.call_tool("write_file", {"path": "c.txt", "content": "c"})
            actions = (await web.get("/console/api/actions")).json()
    text = _text(outcome[0])
    assert text.startswith("ok | ") and "not b, write it to c.txt" in text
    assert (server.workspace / "a.txt").exists() and not (server.workspace / "b.txt").exists()
    assert not direct.is_error and (server.workspace / "c.txt").read_text() == "c"
    assert sorted(a["detail"].split(":")[0] for a in actions) == ["allow", "deny"]


async def test_a_read_only_console_shows_everything_and_refuses_every_action(tmp_path: Path) -> None:
    with http_server(tmp_path, "--console", "read-only") as server:
        async with console(server) as web, session(server.url) as client:
            await client.call_tool("bash", {"command": "cat", "run_in_background": True})
            assert (await web.get("/console/api/me")).json()["mode"] == "read-only"
            session_id = await _only_session(web)
            (proc,) = (await web.get(f"/console/api/sessions/{session_id}/processes")).json()
            at = f"/console/api/sessions/{session_id}/processes/{proc['process_id']}"
            for path, body in [
                (f"{at}/takeover", {"on": True}),
                (f"{at}/input", {"text": "x"}),
                (f"{at}/stop", {}),
                ("/console/api/trash/empty", {}),
                ("/console/api/approvals/x", {"decision": "allow"}),
            ]:
                refused = await post(web, server, path, body)
                assert refused.status_code == 403 and "read-only" in refused.json()["error"], path
            (still,) = (await web.get(f"/console/api/sessions/{session_id}/processes")).json()
            assert still["state"] == "running" and (await web.get("/console/api/actions")).json() == []


async def test_a_console_switched_off_is_not_served(tmp_path: Path) -> None:
    with http_server(tmp_path, "--console", "off") as server:
        async with httpx2.AsyncClient(base_url=base_of(server)) as web:
            assert (await web.get("/console")).status_code == 404
            assert (
                await web.post("/console/login", json={"token": TOKEN}, headers=same_origin(server))
            ).status_code == 404


async def test_the_trash_lists_and_restores_what_a_command_deleted(server: HttpServer) -> None:
    (server.workspace / "keep.txt").write_text("precious")
    async with console(server) as web, session(server.url) as client:
        removed = await client.call_tool("bash", {"command": "rm keep.txt"})
        assert not removed.is_error and not (server.workspace / "keep.txt").exists()
        (entry,) = (await web.get("/console/api/trash")).json()
        assert entry["path"] == str(server.workspace / "keep.txt")
        restored = await post(web, server, f"/console/api/trash/{entry['id']}/restore", {})
        assert restored.status_code == 200 and (server.workspace / "keep.txt").read_text() == "precious"
        assert (await web.get("/console/api/trash")).json() == []
        (action,) = (await web.get("/console/api/actions")).json()
        assert action["action"] == "trash_restore" and action["detail"] == entry["path"]


async def test_a_taken_over_terminal_takes_the_persons_size_and_gets_its_own_back(server: HttpServer) -> None:
    async with console(server) as web, session(server.url) as client:
        started = await client.call_tool(
            "bash", {"command": "while read line; do stty size; done", "run_in_background": True}
        )
        assert not started.is_error
        session_id = await _only_session(web)
        (proc,) = (await web.get(f"/console/api/sessions/{session_id}/processes")).json()
        pid, at = proc["process_id"], f"/console/api/sessions/{session_id}/processes/{proc['process_id']}"
        early = await post(web, server, f"{at}/resize", {"rows": 30, "cols": 100})
        assert early.status_code == 409  # the window is the model's until a person takes it
        await post(web, server, f"{at}/takeover", {"on": True})
        for bad in ({"rows": 0, "cols": 100}, {"rows": "30", "cols": 100}, {"rows": 30, "cols": 5000}):
            assert (await post(web, server, f"{at}/resize", bad)).status_code in (400, 409), bad
        assert (await post(web, server, f"{at}/resize", {"rows": 30, "cols": 100})).status_code == 200
        async with watching(web, f"{at}/stream?offset=0") as terminal:
            await post(web, server, f"{at}/input", {"text": "\n"})
            await terminal.wait_for(lambda ev: "30 100" in "".join(d["data"] for n, d in ev if n == "output"))
            await post(web, server, f"{at}/takeover", {"on": False})
            await client.call_tool("bash", {"action": "write", "process_id": pid, "input": "\n"})
            await terminal.wait_for(lambda ev: "50 200" in "".join(d["data"] for n, d in ev if n == "output"))
