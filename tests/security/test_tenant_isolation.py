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

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.mcp.http_support import INITIALIZE, auth, http_server, open_raw, rpc_answer, run_code_call

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


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
            opened = await open_raw(http, server.url, token=ALICE)
            alice = opened.headers
            stored = rpc_answer(
                await http.post(
                    server.url, headers=alice, json=run_code_call('await store.set("k", "alice\'s")')
                )
            )
            assert "error" not in stored and not stored["result"].get("isError"), stored
            # Bob, with Alice's session id: as if there were no such session; nothing runs in it.
            as_bob = {**alice, "Authorization": f"Bearer {BOB}"}
            marker = server.workspace / "bob-was-here"
            tried = await http.post(
                server.url,
                headers=as_bob,
                json=run_code_call(f'await tools.write_file({{path: "{marker.name}", content: "x"}})'),
            )
            assert tried.status_code == 404, tried.text
            assert "holds no MCP session with this id for you" in tried.text and "ended" not in tried.text
            assert not marker.exists()
            assert (await http.delete(server.url, headers=as_bob)).status_code == 404
            # Alice's session goes on, her store intact; Bob's own session sees nothing of it.
            read = rpc_answer(
                await http.post(server.url, headers=alice, json=run_code_call('print(await store.get("k"))'))
            )
            assert _text(read).strip() == "alice's", read
            bob = (await open_raw(http, server.url, token=BOB)).headers
            own = rpc_answer(
                await http.post(server.url, headers=bob, json=run_code_call('print(await store.get("k"))'))
            )
            assert _text(own).strip() == "null", own
            # Once Alice closed it, Bob is still told nothing of it; Alice is told how it ended.
            assert (await http.delete(server.url, headers=alice)).status_code == 200
            after = await http.post(server.url, headers=as_bob, json=run_code_call("print(1)"))
            assert after.status_code == 404 and "for you" in after.text and "closed" not in after.text
            told = await http.post(server.url, headers=alice, json=run_code_call("print(1)"))
            assert told.status_code == 404 and "the client closed it (DELETE)" in told.text
            # Alice's resume secret is no use to Bob: his token does not resume her session.
            stolen = {**auth(BOB), "Codemode-Resume": opened.resume_secret}
            refused = await http.post(server.url, headers=stolen, json=INITIALIZE)
            assert refused.status_code == 404 and "resumes no ended session of yours" in refused.text
        refusals = server.stderr.read_text()
        assert ALICE not in refusals and BOB not in refusals
