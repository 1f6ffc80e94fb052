"""Two `codemode mcp --http` fronts on one state directory (two replicas): the console of
either lists the sessions both hold and follows the programs the other runs, live, through the
state directory."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp.types as types
import pytest

from tests.console.console_support import console, until, watching
from tests.mcp.http_support import http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent)).strip()


async def test_a_console_shows_the_sessions_and_programs_of_another_front(tmp_path: Path) -> None:
    program = (
        "const a = await tools.bash({command: 'echo first'});\n"
        "const b = await tools.bash({command: 'sleep 1.5; echo second'});\n"
        "print(a.stdout.excerpt.trim() + ' ' + b.stdout.excerpt.trim());"
    )
    with http_server(tmp_path, name="a") as front_a, http_server(tmp_path, name="b") as front_b:
        async with (
            console(front_b) as web,
            watching(web) as log,
            session(front_a.url, client_name="replica-test") as client,
        ):
            result = await client.call_tool("run_code", {"code": "print('warm')"})
            assert _text(result) == "warm"

            async def listed() -> bool:
                sessions = (await web.get("/console/api/sessions")).json()
                return any(s["client"] and "replica-test" in s["client"] for s in sessions)

            await until(listed)
            (held,) = [s for s in (await web.get("/console/api/sessions")).json() if s["client"]]
            assert held["here"] is False and held["open"] is True  # front a holds it
            sid = held["session_id"]

            done: list[types.CallToolResult] = []

            async def run() -> None:
                done.append(await client.call_tool("run_code", {"code": program}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                # While it runs on front a, front b's stream tells of it and of its first call.
                await log.wait_for(
                    lambda ev: any(
                        n == "call" and d["session_id"] == sid and "echo first" in d["call"]["args"]
                        for n, d in ev
                    )
                )
                (run_id,) = {
                    d["run_id"]
                    for n, d in log.events
                    if n == "call" and d["session_id"] == sid and "echo first" in d["call"]["args"]
                }
                assert any(
                    n == "run" and d["run_id"] == run_id and d["status"] == "running" for n, d in log.events
                )
            assert _text(done[0]) == "first second"
            await log.wait_for(
                lambda ev: any(n == "run" and d["run_id"] == run_id and d["status"] == "ok" for n, d in ev)
            )
            runs = (await web.get(f"/console/api/sessions/{sid}/runs")).json()
            assert [r["status"] for r in runs] == ["ok", "ok"] and runs[0]["run_id"] == run_id
            assert runs[0]["first_line"].startswith("const a")
            detail = (await web.get(f"/console/api/sessions/{sid}/runs/{run_id}")).json()
            assert detail["source"] == program and detail["output"].strip() == "first second"
            assert [c["name"] for c in detail["calls"] if c["kind"] == "tool"] == ["bash", "bash"]
            missing = await web.get(f"/console/api/sessions/{sid}/runs/no-such-run")
            assert missing.status_code == 404
