"""Two `codemode mcp --http` servers, each with a state directory of its own (two machines),
sharing one PostgreSQL database (a real cluster): a session opened on one and closed there is
resumed on the other with its secret, its store and its recorded results there; the other
answers for the background process the session left running on the first, and the process's
completion reaches the session there; the database URL reaches no command. Raw HTTP, loopback
only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from codemode.state import State
from tests.mcp.http_support import INITIALIZE, auth, http_server, open_raw, rpc_answer

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


def _call(code: str, call_id: str | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"code": code}
    if call_id is not None:
        arguments["call_id"] = call_id
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": arguments},
    }


async def _run(
    http: httpx2.AsyncClient, url: str, session: dict[str, str], code: str, call_id: str | None = None
) -> str:
    answer = rpc_answer(await http.post(url, headers=session, json=_call(code, call_id)))
    text: str = answer["result"]["structuredContent"]["text"]
    return text


async def test_a_session_moves_between_two_servers_on_one_database(tmp_path: Path, database_url: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    env = {"CODEMODE_DATABASE_URL": database_url}
    with (
        http_server(tmp_path / "a", name="a", env=env) as first,
        http_server(tmp_path / "b", name="b", env=env) as second,
        anyio.fail_after(120),
    ):
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await open_raw(http, first.url)
            await _run(http, first.url, opened.headers, 'await store.set("k", {n: 42}); print("set")')
            once = await _run(http, first.url, opened.headers, "print(Math.random())", call_id="c1")
            seen = await _run(
                http, first.url, opened.headers, 'print((await tools.bash({command: "env"})).stdout.excerpt)'
            )
            assert "PATH=" in seen and "CODEMODE_DATABASE_URL" not in seen and "search_path" not in seen
            started = await _run(
                http,
                first.url,
                opened.headers,
                'const p = await tools.bash({command: "read go < /dev/null; sleep 2; echo done-elsewhere",'
                ' run_in_background: true, lifecycle: "managed"}); print(p.process_id)',
            )
            process_id = started.strip()
            still_open = await http.post(
                second.url, headers={**auth(), "Codemode-Resume": opened.resume_secret}, json=INITIALIZE
            )
            assert still_open.status_code == 409, still_open.text  # held by the other server
            assert (await http.delete(first.url, headers=opened.headers)).status_code == 200

            moved = await open_raw(http, second.url, resume=opened.resume_secret)
            kept = await _run(http, second.url, moved.headers, 'print(JSON.stringify(await store.get("k")))')
            assert kept.strip() == '{"n":42}'
            replayed = await _run(http, second.url, moved.headers, "print(Math.random())", call_id="c1")
            assert replayed == once  # the recorded result, not a new run
            asked = await _run(
                http,
                second.url,
                moved.headers,
                f'try {{ await tools.bash({{action: "read", process_id: "{process_id}"}}) }} catch (e) {{ print(e.message) }}',
            )
            assert "runs on another machine" in asked or "has ended" in asked, (
                asked + first.stderr.read_text() + second.stderr.read_text()
            )
            while process_id not in (told := await _run(http, second.url, moved.headers, 'print("tick")')):
                await anyio.sleep(0.2)
            assert "exit code 0" in told or "exited" in told, told
    for side in ("a", "b"):  # each state directory's own database kept none of it
        with State(tmp_path / side / "state") as local, local.db.connection() as conn:
            assert conn.execute("SELECT COUNT(*) FROM store_values").fetchone() == (0,)
            assert conn.execute("SELECT COUNT(*) FROM session_holds").fetchone() == (0,)
