"""Resuming a session's store and archive from a new MCP session, with the secret the server
issued when the session opened: after the client closed it, and after the server was killed
and restarted. Raw HTTP against a real `codemode mcp --http` (loopback only)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.mcp.http_support import TOKEN, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_AUTH = {**_ACCEPT, "Authorization": f"Bearer {TOKEN}"}
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def _answer(response: httpx2.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        parsed: dict[str, Any] = json.loads(data[-1])
        return parsed
    answer: dict[str, Any] = response.json()
    return answer


async def _open(http: httpx2.AsyncClient, url: str, resume: str | None = None) -> tuple[dict[str, str], str]:
    """A session opened by hand (resuming one, given its secret): its request headers, and the
    resume secret the server sent."""
    headers = {**_AUTH, **({"Codemode-Resume": resume} if resume else {})}
    opened = await http.post(url, headers=headers, json=_INITIALIZE)
    assert opened.status_code == 200, opened.text
    session = {
        **_AUTH,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-06-18",
    }
    await http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session, opened.headers["codemode-resume-secret"]


async def _run(http: httpx2.AsyncClient, url: str, session: dict[str, str], code: str) -> dict[str, Any]:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": code}},
    }
    answer = _answer(await http.post(url, headers=session, json=call))
    structured: dict[str, Any] = answer["result"]["structuredContent"]
    return structured


async def test_a_closed_session_resumes_with_its_secret_and_only_with_it(tmp_path: Path) -> None:
    with http_server(tmp_path) as server, anyio.fail_after(90):
        async with httpx2.AsyncClient(timeout=60) as http:
            first, secret = await _open(http, server.url)
            assert len(secret) >= 40
            await _run(http, server.url, first, 'await store.set("k", "kept"); print("ok")')
            big = await _run(http, server.url, first, 'print("line\\n".repeat(40000))')
            ref = big["refs"][0]
            still_open = await http.post(
                server.url, headers={**_AUTH, "Codemode-Resume": secret}, json=_INITIALIZE
            )
            assert still_open.status_code == 409 and "still open in another MCP session" in still_open.text
            assert (await http.delete(server.url, headers=first)).status_code == 200

            second, renewed = await _open(http, server.url, resume=secret)
            assert second["Mcp-Session-Id"] != first["Mcp-Session-Id"] and renewed != secret
            kept = await _run(http, server.url, second, 'print(await store.get("k"))')
            assert kept["text"].strip() == "kept"
            read = await _run(
                http,
                server.url,
                second,
                f'print((await tools.read_archive({{ref: "{ref}", limit: 5}})).text)',
            )
            assert "line" in read["text"], read
            for wrong in (secret, "not-a-secret-" + "x" * 30):  # replaced by the renewed one; made up
                refused = await http.post(
                    server.url, headers={**_AUTH, "Codemode-Resume": wrong}, json=_INITIALIZE
                )
                assert refused.status_code == 404 and "resumes no ended session of yours" in refused.text
            misplaced = await http.post(
                server.url, headers={**second, "Codemode-Resume": renewed}, json=_INITIALIZE
            )
            assert misplaced.status_code == 400 and "only with initialize" in misplaced.text


async def test_a_session_of_a_killed_server_resumes_on_the_next_one(tmp_path: Path) -> None:
    with anyio.fail_after(120):
        async with httpx2.AsyncClient(timeout=60) as http:
            with http_server(tmp_path, name="first") as server:
                session, secret = await _open(http, server.url)
                await _run(http, server.url, session, 'await store.set("k", "survived"); print("ok")')
                server.process.send_signal(signal.SIGKILL)
                server.process.wait(timeout=30)
            with http_server(tmp_path, name="second") as again:
                resumed, _ = await _open(http, again.url, resume=secret)
                kept = await _run(http, again.url, resumed, 'print(await store.get("k"))')
                assert kept["text"].strip() == "survived"
