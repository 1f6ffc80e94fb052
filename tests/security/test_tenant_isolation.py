"""Attack class: another tenant's session.

A front with a tenants file lets several parties in, each with its own token. An MCP session
belongs to the tenant that opened it: a request of another tenant naming its Mcp-Session-Id
(leaked, guessed, logged by a proxy) reaches nothing of it (no program runs in it, no store
read, no DELETE ends it) and is answered as if it did not exist, with nothing said of how it
ended; her resume secret resumes nothing for him. Two walls, each enough alone (checked by breaking both, then each): the front's own check
before the SDK sees the request, and the SDK's refusal of a session to a client id other than the
one that opened it (each tenant is its own client id). The tests drive a real
`codemode mcp --http` with raw HTTP requests (loopback only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.mcp.http_support import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a response (a JSON body, or the last `data:` of an SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        parsed: dict[str, Any] = json.loads(data[-1])
        return parsed
    answer: dict[str, Any] = response.json()
    return answer


async def _open(http: httpx2.AsyncClient, url: str, token: str) -> dict[str, str]:
    """A session opened by hand (initialize, initialized): the headers of its requests."""
    auth = {**_ACCEPT, "Authorization": f"Bearer {token}"}
    opened = await http.post(
        url,
        headers=auth,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert opened.status_code == 200, opened.text
    _secrets[token] = opened.headers["codemode-resume-secret"]
    headers = {
        **auth,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-06-18",
    }
    await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


_secrets: dict[str, str] = {}  # token -> the resume secret of the last session it opened


def _run(code: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": code}},
    }


def _text(answer: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in answer["result"]["content"])


async def test_another_tenants_session_is_out_of_reach(tmp_path: Path) -> None:
    tenants = tmp_path / "state" / "tenants"
    tenants.parent.mkdir()
    tenants.write_text(f"alice {ALICE}\nbob {BOB}\n")
    with (
        http_server(tmp_path, "--tenants-file", str(tenants), env={"CODEMODE_MCP_TOKEN": ""}) as server,
        anyio.fail_after(90),
    ):
        async with httpx2.AsyncClient(timeout=60) as http:
            alice = await _open(http, server.url, ALICE)
            stored = _answer(
                await http.post(server.url, headers=alice, json=_run('await store.set("k", "alice\'s")'))
            )
            assert "error" not in stored and not stored["result"].get("isError"), stored
            # Bob, with Alice's session id: as if there were no such session; nothing runs in it.
            as_bob = {**alice, "Authorization": f"Bearer {BOB}"}
            marker = server.workspace / "bob-was-here"
            tried = await http.post(
                server.url,
                headers=as_bob,
                json=_run(f'await tools.write_file({{path: "{marker.name}", content: "x"}})'),
            )
            assert tried.status_code == 404, tried.text
            assert "holds no MCP session with this id for you" in tried.text and "ended" not in tried.text
            assert not marker.exists()
            assert (await http.delete(server.url, headers=as_bob)).status_code == 404
            # Alice's session goes on, her store intact; Bob's own session sees nothing of it.
            read = _answer(
                await http.post(server.url, headers=alice, json=_run('print(await store.get("k"))'))
            )
            assert _text(read).strip() == "alice's", read
            bob = await _open(http, server.url, BOB)
            own = _answer(await http.post(server.url, headers=bob, json=_run('print(await store.get("k"))')))
            assert _text(own).strip() == "null", own
            # Once Alice closed it, Bob is still told nothing of it; Alice is told how it ended.
            assert (await http.delete(server.url, headers=alice)).status_code == 200
            after = await http.post(server.url, headers=as_bob, json=_run("print(1)"))
            assert after.status_code == 404 and "for you" in after.text and "closed" not in after.text
            told = await http.post(server.url, headers=alice, json=_run("print(1)"))
            assert told.status_code == 404 and "the client closed it (DELETE)" in told.text
            # Alice's resume secret is no use to Bob: his token does not resume her session.
            initialize = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
            stolen = {**_ACCEPT, "Authorization": f"Bearer {BOB}", "Codemode-Resume": _secrets[ALICE]}
            refused = await http.post(server.url, headers=stolen, json=initialize)
            assert refused.status_code == 404 and "resumes no ended session of yours" in refused.text
        refusals = server.stderr.read_text()
        assert ALICE not in refusals and BOB not in refusals
