"""Attack class: one tenant's console reading or acting on another tenant's sessions.

With ``--tenants-file`` each tenant logs in with its own token and sees only the sessions its
token opened: their list, runs, processes, terminals, archives, notices and events; the trash
(the workspace's, shared) is shown to no one.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.console.console_support import console, post, watching
from tests.mcp.http_support import http_server, session

pytestmark = [pytest.mark.anyio, pytest.mark.blackbox]

_ALICE = "alice-token-0123456789"
_BOB = "bob-token-01234567890"


async def test_a_tenant_sees_and_touches_only_its_own_sessions(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants"
    tenants.write_text(f"alice {_ALICE}\nbob {_BOB}\n")
    with http_server(tmp_path, "--tenants-file", str(tenants), env={"CODEMODE_MCP_TOKEN": ""}) as server:
        async with (
            console(server, _ALICE) as alice_web,
            console(server, _BOB) as bob_web,
            watching(bob_web) as bob_events,
            session(server.url, token=_ALICE) as alice,
        ):
            await alice.call_tool("bash", {"command": "cat", "run_in_background": True})
            await alice.call_tool("run_code", {"code": "print('alice secret output')"})
            (mine,) = (await alice_web.get("/console/api/sessions")).json()
            sid = mine["session_id"]
            assert (await bob_web.get("/console/api/sessions")).json() == []
            (proc,) = (await alice_web.get(f"/console/api/sessions/{sid}/processes")).json()
            at = f"/console/api/sessions/{sid}/processes/{proc['process_id']}"
            for path in (
                f"/console/api/sessions/{sid}/runs",
                f"/console/api/sessions/{sid}/processes",
                f"/console/api/sessions/{sid}/notices",
                f"{at}/stream",
            ):
                assert (await bob_web.get(path)).status_code == 404, path
            for path, body in [(f"{at}/takeover", {"on": True}), (f"{at}/stop", {})]:
                assert (await post(bob_web, server, path, body)).status_code == 404, path
            assert (await bob_web.get("/console/api/trash")).status_code == 403
            async with session(server.url, token=_BOB) as bob:
                await bob.call_tool("run_code", {"code": "print('bob')"})
            await bob_events.wait_for(lambda ev: any(n == "run" and d["status"] == "ok" for n, d in ev))
            with anyio.move_on_after(0.5):  # alice's events, had they leaked, would be here by now
                await bob_events.wait_for(lambda ev: False)
            (still,) = (await alice_web.get(f"/console/api/sessions/{sid}/processes")).json()
    assert still["state"] == "running" and not still["taken_over"]
    seen = {d.get("session_id") for _, d in bob_events.events}
    assert sid not in seen and all(s is None or not s.startswith(sid) for s in seen)
    assert "alice secret output" not in str(bob_events.events)


async def test_another_fronts_sessions_stay_their_tenants_own(tmp_path: Path) -> None:
    # Two fronts on one state directory: what front a's tenant ran reaches front b's console
    # through the state (the session list, the journal of programs, their live events), and
    # only for that tenant's login.
    tenants = tmp_path / "tenants"
    tenants.write_text(f"alice {_ALICE}\nbob {_BOB}\n")
    flags = ("--tenants-file", str(tenants))
    env = {"CODEMODE_MCP_TOKEN": ""}
    with (
        http_server(tmp_path, *flags, name="a", env=env) as front_a,
        http_server(tmp_path, *flags, name="b", env=env) as front_b,
    ):
        async with (
            console(front_b, _ALICE) as alice_web,
            console(front_b, _BOB) as bob_web,
            watching(bob_web) as bob_events,
            watching(alice_web) as alice_events,
            session(front_a.url, token=_ALICE) as alice,
        ):
            await alice.call_tool("run_code", {"code": "print('alice secret output')"})
            await alice_events.wait_for(lambda ev: any(n == "run" and d["status"] == "ok" for n, d in ev))
            (mine,) = (await alice_web.get("/console/api/sessions")).json()  # front b lists it for alice
            sid = mine["session_id"]
            assert mine["here"] is False
            (run,) = (await alice_web.get(f"/console/api/sessions/{sid}/runs")).json()
            assert (await bob_web.get("/console/api/sessions")).json() == []
            for path in (
                f"/console/api/sessions/{sid}/runs",
                f"/console/api/sessions/{sid}/runs/{run['run_id']}",
                f"/console/api/sessions/{sid}/processes",
            ):
                assert (await bob_web.get(path)).status_code == 404, path
    assert sid not in {d.get("session_id") for _, d in bob_events.events}
    assert "alice secret output" not in str(bob_events.events)
