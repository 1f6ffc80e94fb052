"""Resuming a session's store and archive from a new MCP session, with the secret the server
issued when the session opened: after the client closed it, and after the server was killed
and restarted. Raw HTTP against a real `codemode mcp --http` (loopback only)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.mcp.http_support import INITIALIZE, auth, http_server, open_raw, rpc_answer, run_code_call

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


async def _run(http: httpx2.AsyncClient, url: str, session: dict[str, str], code: str) -> dict[str, Any]:
    answer = rpc_answer(await http.post(url, headers=session, json=run_code_call(code)))
    structured: dict[str, Any] = answer["result"]["structuredContent"]
    return structured


async def _initialize(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> httpx2.Response:
    return await http.post(url, headers=headers, json=INITIALIZE)


async def test_a_closed_session_resumes_with_its_secret_and_only_with_it(tmp_path: Path) -> None:
    with http_server(tmp_path) as server, anyio.fail_after(90):
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await open_raw(http, server.url)
            first, secret = opened.headers, opened.resume_secret
            assert len(secret) >= 40
            await _run(http, server.url, first, 'await store.set("k", "kept"); print("ok")')
            big = await _run(http, server.url, first, 'print("line\\n".repeat(40000))')
            ref = big["refs"][0]
            still_open = await _initialize(http, server.url, {**auth(), "Codemode-Resume": secret})
            assert still_open.status_code == 409 and "still open in another MCP session" in still_open.text
            assert (await http.delete(server.url, headers=first)).status_code == 200

            resumed = await open_raw(http, server.url, resume=secret)
            second, renewed = resumed.headers, resumed.resume_secret
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
                refused = await _initialize(http, server.url, {**auth(), "Codemode-Resume": wrong})
                assert refused.status_code == 404 and "resumes no ended session of yours" in refused.text
            misplaced = await _initialize(http, server.url, {**second, "Codemode-Resume": renewed})
            assert misplaced.status_code == 400 and "only with initialize" in misplaced.text


async def test_a_session_of_a_killed_server_resumes_on_the_next_one(tmp_path: Path) -> None:
    with anyio.fail_after(120):
        async with httpx2.AsyncClient(timeout=60) as http:
            with http_server(tmp_path, name="first") as server:
                opened = await open_raw(http, server.url)
                session, secret = opened.headers, opened.resume_secret
                await _run(http, server.url, session, 'await store.set("k", "survived"); print("ok")')
                server.process.send_signal(signal.SIGKILL)
                server.process.wait(timeout=30)
            with http_server(tmp_path, name="second") as again:
                resumed = await open_raw(http, again.url, resume=secret)
                kept = await _run(http, again.url, resumed.headers, 'print(await store.get("k"))')
                assert kept["text"].strip() == "survived"
